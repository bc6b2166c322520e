"""Stand-in for ``slime/utils/processing_utils.py``: the tokenizer (and processor) slime loads from its checkpoint."""

from transformers import AutoTokenizer


def load_tokenizer(name_or_path: str, **kwargs):
    return AutoTokenizer.from_pretrained(name_or_path, **kwargs)


def load_processor(name_or_path: str, **kwargs):
    """slime loads an ``AutoProcessor`` and keeps it only for multimodal models: none for a text model."""
    return None
