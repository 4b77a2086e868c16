"""An API key never reaches a record or a log: every stored text (errors, answers, reasoning) is
scrubbed of the key, in any representation it may take there, before it is stored or logged."""

from __future__ import annotations

import base64
import json
import urllib.parse

FRAGMENT = 8  # shortest piece of a key that counts as a leak


def secret_forms(secret: str) -> list[str]:
    """The ways a secret turns up in error text: raw, repr/JSON-escaped, URL-encoded, base64 (at
    each of the three alignments it can take inside a longer base64 string)."""
    forms = [secret, secret.encode("unicode_escape").decode("ascii"), json.dumps(secret)[1:-1],
             urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)]
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + secret.encode()).decode("ascii").rstrip("=")
        forms.append(encoded[(4 * pad + 2) // 3:-1])
    return [f for f in dict.fromkeys(forms) if f]


def scrub_secret(text: str, secret: str | None) -> str:
    """``text`` with every run of characters that belongs to a form of ``secret`` in pieces of
    ``FRAGMENT`` or more characters replaced by ``[redacted]`` (linear in ``len(text)``)."""
    if not secret or not text:
        return text
    grams = {f[i:i + FRAGMENT] for f in secret_forms(secret) for i in range(max(1, len(f) - FRAGMENT + 1))}
    hit = bytearray(len(text))
    for i in range(len(text) - FRAGMENT + 1):
        if text[i:i + FRAGMENT] in grams:
            hit[i:i + FRAGMENT] = b"\1" * FRAGMENT
    if len(secret) < FRAGMENT and secret in text:  # a short key is still not shown
        return text.replace(secret, "[redacted]")
    out, i = [], 0
    while i < len(text):
        if hit[i]:
            while i < len(text) and hit[i]:
                i += 1
            out.append("[redacted]")
        else:
            out.append(text[i])
            i += 1
    return "".join(out)
