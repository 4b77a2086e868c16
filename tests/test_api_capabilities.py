"""The capability table matches exact model families and dated snapshots; a model it does not
know gets its vendor's conservative row (only what every model of the vendor accepts), with the
reason recorded. Names come from the pinned SDKs' own model lists."""

from __future__ import annotations

import typing

import pytest

from harness.models.api_capabilities import family_of


def sdk_names(alias) -> set[str]:
    """The model names a pinned SDK's ``Literal`` type lists."""
    out: set[str] = set()
    for arg in typing.get_args(alias):
        out |= sdk_names(arg) if typing.get_args(arg) else ({arg} if isinstance(arg, str) and arg else set())
    return out


@pytest.mark.parametrize("model,family", [
    ("claude-opus-4-20250514", "claude-3.x/4.0/4.1"),  # Opus 4.0: not the Opus 4.7+ rules
    ("claude-sonnet-4-20250514", "claude-3.x/4.0/4.1"),
    ("claude-opus-4-1-20250805", "claude-3.x/4.0/4.1"),
    ("claude-opus-4-0", "claude-3.x/4.0/4.1"),
    ("claude-3-7-sonnet-20250219", "claude-3.x/4.0/4.1"),
    ("claude-3-5-haiku-20241022", "claude-3.x/4.0/4.1"),
    ("claude-opus-4-6", "claude-4.5/4.6"),
    ("claude-sonnet-4-5-20250929", "claude-4.5/4.6"),
    ("claude-haiku-4-5-20251001", "claude-4.5/4.6"),
    ("claude-opus-4-7", "claude-opus-4.7"),
    ("gpt-4o-2024-08-06", "gpt-4 and earlier"),
    ("gpt-4-0613", "gpt-4 and earlier"),
    ("gpt-4.1-mini-2025-04-14", "gpt-4 and earlier"),
    ("gpt-5-nano", "gpt-5"),
    ("gpt-5-2025-08-07", "gpt-5"),
    ("gpt-5.2-2025-12-11", "gpt-5.x"),
    ("gpt-5-chat-latest", "gpt-5-chat"),
    ("o3-mini-2025-01-31", "o-series"),
    ("gemini-2.5-flash-lite", "gemini-2.5-flash-lite"),
    ("gemini-2.5-pro-preview-06-05", "gemini-2.5-pro"),
    ("gemini-2.0-flash-001", "gemini-2.0 and earlier"),
    ("gemini-3-pro-preview", "gemini-3"),
])
def test_names_match_their_exact_family(model, family):
    provider = "anthropic" if model.startswith("claude") else "google" if model.startswith("gemini") else "openai"
    row, known = family_of(provider, model)
    assert (row.name, known) == (family, True)


@pytest.mark.parametrize("provider,model", [
    ("anthropic", "claude-sonnet-5"), ("anthropic", "claude-haiku-5-5"), ("anthropic", "claude-opus-4-8"),
    ("anthropic", "claude-opus-4-7-extra"), ("openai", "gpt-6-sol"), ("openai", "gpt-4o-search-preview"),
    ("openai", "acme-vision-9"), ("google", "gemini-9-ultra"), ("azure", "my-deployment"),
])
def test_unknown_models_get_the_conservative_row(provider, model):
    row, known = family_of(provider, model)
    assert not known and row.name.endswith("(unknown: conservative)")
    # only what every model of the vendor accepts: no sampling parameter, no seed, no thinking form
    assert not (row.temperature or row.top_p or row.seed or row.thinking)


def test_every_model_the_sdks_list_is_known_or_conservative_never_a_wrong_row():
    from anthropic.types import ModelParam
    from openai.types import ChatModel

    claude = sdk_names(ModelParam)
    assert "claude-opus-4-7" in claude
    for name in claude:
        row, known = family_of("anthropic", name)
        # a newer generation never gets an older generation's rules
        if name.startswith(("claude-sonnet-5", "claude-haiku-5", "claude-opus-5", "claude-fable", "claude-mythos")):
            assert not known, name
    for name in sdk_names(ChatModel):
        row, known = family_of("openai", name)
        if name.startswith("gpt-6"):
            assert not known, name


def test_the_reason_is_recorded_with_each_trial(monkeypatch):
    import httpx2
    from PIL import Image

    from harness.models.api import APIModel
    from harness.models.base import ModelSpec

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-0123456789")
    adapter = APIModel(ModelSpec(id="m", source="api", name="anthropic/claude-sonnet-5",
                                 options={"base_url": "http://vendor.test", "max_retries": 0}))
    adapter._http = httpx2.Client(transport=httpx2.MockTransport(lambda r: httpx2.Response(200, json={
        "content": [{"type": "text", "text": "2"}], "stop_reason": "end_turn", "usage": {}})))
    gen = adapter.generate(Image.new("RGB", (4, 4)), "Which?", {"max_new_tokens": 40, "temperature": 0.0})
    assert gen.text == "2" and gen.settings_dropped == {"temperature": 0.0}
    assert "claude-sonnet-5 is not in the capability table" in gen.extras["capabilities"]
