"""The local Tinker endpoint as a real process, driven by the ``tinker`` SDK's own clients.

What an RL loop calls: a training client on the served base model, a sampling client on its saved weights
(token ids and logprobs that the policy itself recomputes), ``forward_backward`` with the importance-sampling
loss (its logprobs are the sampler's, its loss Tinker's formula), ``optim_step`` moving the weights, and the
saved sampler weights reaching the endpoint's OpenAI surface as the next weight version.
"""

import httpx
import pytest

torch = pytest.importorskip("torch")
tinker = pytest.importorskip("tinker")

from local_stack.tiny_policy import ChatTokenizer  # noqa: E402

pytestmark = pytest.mark.e2e

MODEL = "tiny-policy"


@pytest.fixture(scope="module")
def service(tinker_endpoint):
    with tinker.ServiceClient(base_url=tinker_endpoint, api_key="tml-local") as service:
        yield service


def _prompt():
    tokenizer = ChatTokenizer()
    return tokenizer.render_prompt([{"role": "user", "content": "say a digit"}])


def _datum(prompt, sequence, advantage):
    ids = prompt + list(sequence.tokens)
    n = len(ids) - 1
    logprobs = [0.0] * (len(prompt) - 1) + list(sequence.logprobs)
    advantages = [0.0] * (len(prompt) - 1) + [advantage] * len(sequence.tokens)
    return tinker.Datum(
        model_input=tinker.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={
            "target_tokens": tinker.TensorData(data=ids[1:], dtype="int64", shape=[n]),
            "logprobs": tinker.TensorData(data=logprobs, dtype="float32", shape=[n]),
            "advantages": tinker.TensorData(data=advantages, dtype="float32", shape=[n]),
        },
    )


def test_capabilities_name_the_served_policy(service):
    models = service.get_server_capabilities().supported_models
    assert [(m.model_name, m.trainable, m.sampleable) for m in models] == [(MODEL, True, True)]


def test_an_rl_step_through_the_sdk_is_token_exact_and_moves_the_weights(service, tinker_endpoint):
    training = service.create_lora_training_client(base_model=MODEL, rank=8, seed=1).result()
    sampler = training.save_weights_and_get_sampling_client().result()
    prompt = _prompt()
    params = tinker.SamplingParams(max_tokens=6, temperature=1.0, seed=7)
    sampled = sampler.sample(prompt=tinker.ModelInput.from_ints(prompt), num_samples=3, sampling_params=params).result()
    assert len(sampled.sequences) == 3
    for sequence in sampled.sequences:
        assert 1 <= len(sequence.tokens) <= 6 and len(sequence.logprobs) == len(sequence.tokens)
        assert sequence.stop_reason in ("stop", "length")
    # A seeded request samples the same tokens again.
    again = sampler.sample(prompt=tinker.ModelInput.from_ints(prompt), num_samples=3, sampling_params=params).result()
    assert [s.tokens for s in again.sequences] == [s.tokens for s in sampled.sequences]

    datums = [_datum(prompt, s, a) for s, a in zip(sampled.sequences, (1.0, -0.5, -0.5), strict=True)]
    backward = training.forward_backward(datums, loss_fn="importance_sampling").result()
    start = len(prompt) - 1
    expected_loss = 0.0
    for datum, output, sequence, advantage in zip(
        datums, backward.loss_fn_outputs, sampled.sequences, (1.0, -0.5, -0.5), strict=True
    ):
        recomputed = output["logprobs"].tolist()
        assert len(recomputed) == len(datum.loss_fn_inputs["target_tokens"].data)
        # The trainer's logprobs of the sampled tokens are the sampler's (same weights, fp32).
        assert recomputed[start:] == pytest.approx(list(sequence.logprobs), abs=1e-5)
        # importance_sampling: -sum(exp(lp - sampler_lp) * advantage) = -advantage * tokens at ratio 1.
        expected_loss += -advantage * len(sequence.tokens)
    assert backward.metrics["loss:sum"] == pytest.approx(expected_loss, abs=1e-3)

    step = training.optim_step(tinker.AdamParams(learning_rate=1e-2)).result()
    assert step.metrics["optimizer_steps"] == 1.0 and step.metrics["grad_norm:mean"] > 0
    saved = training.save_weights_for_sampler(name="after-one-step").result()
    assert saved.path.endswith("/sampler_weights/after-one-step")
    moved = service.create_sampling_client(model_path=saved.path)
    resampled = moved.sample(prompt=tinker.ModelInput.from_ints(prompt), num_samples=3, sampling_params=params).result()
    # The same seed under the updated weights: the favoured sequence's tokens got likelier.
    first = training.forward(datums[:1], loss_fn="importance_sampling").result()
    assert sum(first.loss_fn_outputs[0]["logprobs"].tolist()[start:]) > sum(sampled.sequences[0].logprobs)
    assert all(len(s.logprobs) == len(s.tokens) for s in resampled.sequences)

    # The endpoint's OpenAI surface serves the weights last saved for the sampler, as version = optimizer steps.
    weights = httpx.get(f"{tinker_endpoint}/v1/weights").raise_for_status().json()
    assert weights["weight_version"] == 1


def test_refusals_say_what_is_wrong(service):
    with pytest.raises(Exception, match="is not served here; this endpoint serves 'tiny-policy'"):
        service.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=8).result()
    training = service.create_lora_training_client(base_model=MODEL, rank=8).result()
    datum = tinker.Datum(
        model_input=tinker.ModelInput.from_ints([0, 1, 2]),
        loss_fn_inputs={"target_tokens": tinker.TensorData(data=[1, 2, 3], dtype="int64", shape=[3])},
    )
    with pytest.raises(Exception, match="importance_sampling needs logprobs, one per target token"):
        training.forward_backward([datum], loss_fn="importance_sampling").result()


def test_the_doctors_probe_names_what_the_endpoint_serves(tinker_endpoint):
    from trainer_client._tinker import probe_tinker

    assert probe_tinker({"TINKER_BASE_URL": tinker_endpoint}) == (True, f"{tinker_endpoint} serves tiny-policy", "")
    ok, detail, fix = probe_tinker({"TINKER_BASE_URL": "http://127.0.0.1:9"})
    assert not ok and "did not answer" in detail and "rollouts local up --tinker" in fix
    assert probe_tinker({}) is None


def test_a_closed_service_client_ends_its_session(tinker_endpoint):
    with tinker.ServiceClient(base_url=tinker_endpoint, api_key="tml-local") as service:
        service.create_lora_training_client(base_model=MODEL, rank=4).result()
    # __exit__ posted /api/v1/sessions/<id>/finish and got its answer (it raises NotFoundError otherwise).
