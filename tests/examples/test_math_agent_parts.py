"""The math agent's parts: the safe calculator, the GSM8K reward, the datasets and the deployment form."""

from __future__ import annotations

import json

import pytest
from math_agent_fake_model import FakeModel
from starlette.testclient import TestClient

from examples.math_agent.calculator import CalculatorError, evaluate, format_number
from examples.math_agent.dataset import load_gsm8k_jsonl, read_jsonl, synthetic, write_jsonl
from examples.math_agent.reward import GSM8KReward, extract_final_answer
from local_stack.problems import parse_problem


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("12 * (3 + 4) / 2", 42),
        ("7 // 2 + 7 % 2", 4),
        ("-3 ** 2", -9),
        ("1,234 + 1", 1235),
        ("2 ** 10", 1024),
        ("0.1 + 0.2", 0.1 + 0.2),
    ],
)
def test_calculator_evaluates_arithmetic(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os').system('true')", "not Call"),
        ("().__class__", "not Attribute"),
        ("x + 1", "not Name"),
        ("[1, 2]", "not List"),
        ("lambda: 1", "not Lambda"),
        ("'a' * 3", "not Constant"),
        ("True + 1", "not Constant"),
        ("9 ** 9 ** 9", "exponent"),
        ("10 ** 40", "out of range"),
        ("1 / 0", "division by zero"),
        ("2 ^ 3", "write \\*\\*"),
        ("1 +", "not an arithmetic expression"),
        ("1" * 201, "longer than 200"),
    ],
)
def test_calculator_refuses_anything_but_bounded_arithmetic(expression, message):
    with pytest.raises(CalculatorError, match=message):
        evaluate(expression)


def test_calculator_formats_integral_results_without_decimals():
    assert [format_number(v) for v in (3.0, 7, 2.5, 1 / 3)] == ["3", "7", "2.5", "0.3333333333"]


@pytest.mark.parametrize(
    ("response", "truth", "reward"),
    [
        ("so 18 eggs\n#### 18", "18", 1.0),
        ("#### 1,234.", "1234", 1.0),
        ("#### $5.50", 5.5, 1.0),
        ("#### -3", "-3", 1.0),
        ("first #### 7 then corrected #### 8", "8", 1.0),
        ("#### 18.0", "Natalia sold 48/2 = 24 clips... 48+24 = 72\n#### 18", 1.0),
        ("#### 17", "18", 0.0),
        ("the answer is 18", "18", 0.0),
        ("#### eighteen", "18", 0.0),
        ("#### 18", "not a number", 0.0),
    ],
)
def test_gsm8k_reward_compares_the_final_answer_numerically(response, truth, reward):
    assert GSM8KReward()(response=response, ground_truth=truth) == reward


def test_extract_final_answer_returns_none_without_a_marker():
    assert extract_final_answer("42") is None


def test_synthetic_dataset_is_seeded_and_solvable():
    rows = synthetic(12, seed=5)

    assert rows == synthetic(12, seed=5) != synthetic(12, seed=6)
    assert [row["idx"] for row in rows] == list(range(12))
    assert all(str(parse_problem(row["prompt"]).answer) == row["answer"] for row in rows)


def test_dataset_round_trips_through_jsonl(tmp_path):
    rows = synthetic(5, seed=1)

    path = write_jsonl(rows, tmp_path / "out" / "train.jsonl")

    assert read_jsonl(path) == rows


def test_gsm8k_jsonl_becomes_rows_with_the_final_answer(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    records = [
        {"question": "Q1?", "answer": "48/2 = <<48/2=24>>24\n#### 72"},
        {"question": "Q2?", "answer": "big\n#### 1,250"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")

    rows = load_gsm8k_jsonl(path)

    assert rows == [
        {"idx": 0, "prompt": "Q1?", "answer": "72", "data_source": "gsm8k"},
        {"idx": 1, "prompt": "Q2?", "answer": "1250", "data_source": "gsm8k"},
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "gsm8k.jsonl:2: not JSON"),
        (json.dumps({"question": "Q"}), "gsm8k.jsonl:2: expected string fields"),
        (json.dumps({"question": "Q", "answer": "no marker"}), "gsm8k.jsonl:2: the answer does not end"),
    ],
)
def test_bad_gsm8k_lines_are_reported_with_file_and_line(tmp_path, line, message):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text(json.dumps({"question": "Q", "answer": "#### 1"}) + "\n" + line + "\n")

    with pytest.raises(ValueError, match=message):
        load_gsm8k_jsonl(path)


def test_system_prompt_asks_for_the_calculator_and_the_final_answer_format():
    from examples.math_agent.agent import SYSTEM_PROMPT  # here: Strands and the OpenAI SDK take 2 s to import

    assert "calculator" in SYSTEM_PROMPT
    assert "#### <number>" in SYSTEM_PROMPT


def test_deployment_form_answers_synchronously_with_the_same_agent(monkeypatch):
    # GIVEN the deployment app pointed at a scripted model through its environment
    from examples.math_agent import app as deployment

    row = synthetic(1, seed=9)[0]
    with FakeModel() as model:
        monkeypatch.setenv("MODEL_BASE_URL", model.base_url)

        # WHEN it is invoked
        response = TestClient(deployment.app).post("/invocations", json={"prompt": row["prompt"]})

    # THEN it answers in the request with the agent's final text
    assert response.status_code == 200
    assert response.json()["response"].endswith(f"#### {row['answer']}")
