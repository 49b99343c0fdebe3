"""Secrets taken out of transcript text before anything is kept, written or sent, counted per kind."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Optional

# (kind, pattern): the first group, when a pattern has one, is kept and the rest replaced
_PATTERNS: tuple[tuple[str, str], ...] = (
    ("pem_private_key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"),
    ("anthropic_key", r"\bsk-ant-[A-Za-z0-9_\-]{20,}"),
    ("openai_key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"),
    ("aws_access_key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})"),
    ("slack_token", r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),
    ("google_api_key", r"\bAIza[0-9A-Za-z_\-]{35}"),
    ("stripe_key", r"\b[rs]k_(?:live|test)_[0-9A-Za-z]{16,}"),
    ("huggingface_token", r"\bhf_[A-Za-z0-9]{30,}"),
    ("jwt", r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    ("bearer_credential", r"(?i)(\b(?:bearer|basic|token)\s+)[A-Za-z0-9._~+/=\-]{12,}"),
    ("connection_string", r"(?i)((?:AccountKey|SharedAccessKey|Password|Pwd)\s*=\s*)(?!\[REDACTED)[^;\s\"']{4,}"),
    ("azure_sas", r"(?i)([?&]sig=)[A-Za-z0-9%/+=]{16,}"),
    ("url_credentials", r"(?i)(\b[a-z][a-z0-9+.\-]*://[^/\s:@]+:)[^@\s/]{3,}(?=@)"),
    (  # a name that holds a secret word anywhere: AWS_SECRET_ACCESS_KEY=, SECRET_KEY_BASE=, db_password:
        "secret_assignment",
        r"(?i)(\b\w*(?:secret|passw(?:or)?d|key_base|access_key|private_key|api_key|credentials?)\w*"
        r"[\"']?\s*[:=]\s*[\"']?)(?!\[REDACTED)[^\s\"',;}{]{4,}",
    ),
    ("secret_assignment", r"\b([A-Z0-9_]*TOKEN[A-Z0-9_]*\s*=\s*[\"']?)(?!\[REDACTED)[^\s\"',;}{]{4,}"),
    ("password_flag", r"(?i)(--pass(?:wor)?d(?:=|\s+)[\"']?)(?!\[REDACTED|-)[^\s\"']{3,}"),
    (  # `-p X` / `-pX` after a database client (mysql's password; psql's -p is a port), `-a X` after redis-cli
        "password_flag",
        r"(\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump|mongo|mongosh|mongodump|mongorestore)\b"
        r"[^\n;|&]*?\s-p\s?[\"']?|\bredis-cli\b[^\n;|&]*?\s-a\s?[\"']?)(?!\[REDACTED|-)[^\s\"']{3,}",
    ),
    (
        "secret_assignment",
        r"(?i)((?:api[_-]?key|secret|token|passwd|password|private[_-]?key|credential)s?"
        r"[\"']?\s*[:=]\s*[\"']?)(?!\[REDACTED)[^\s\"',;}{]{4,}",
    ),
)
_COMPILED = tuple((kind, re.compile(p)) for kind, p in _PATTERNS)
# a piece of literal text every pattern's match holds (in lower case): a text holding none of them is left as it is
# without running the patterns (most texts hold no secret)
_TRIGGERS = (
    "private key", "sk-", "akia", "asia", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xox", "aiza",
    "_live_", "_test_", "hf_", "eyj", "bearer", "basic", "token", "key", "password", "pwd", "sig=", "://",
    "secret", "passwd", "credential", "mysql", "mariadb", "mongo", "redis-cli", "key_base",
)  # fmt: skip
# a name whose `_`-separated words include one of these (PWD, the working folder, is not a password)
_SECRET_WORDS = {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "CREDENTIAL", "CREDENTIALS",
                 "AUTH", "COOKIE", "PAT", "PRIVATE"}  # fmt: skip
MIN_ENV_VALUE = 8  # shorter values (`1`, `true`, a port) would redact ordinary words


def env_secrets(environ: Optional[Mapping[str, str]] = None) -> tuple[str, ...]:
    """The values of the environment's variables whose names look like secrets, longest first."""
    env = os.environ if environ is None else environ
    vals = {
        v
        for k, v in env.items()
        if _SECRET_WORDS & set(k.upper().split("_")) and len(v.strip()) >= MIN_ENV_VALUE and not v.startswith("/")
    }
    return tuple(sorted(vals, key=len, reverse=True))


@dataclass
class Redactor:
    """Replaces every known secret shape, and the environment's secret values, with `[REDACTED:<kind>]`."""

    env_values: tuple[str, ...] = ()
    counts: Counter = field(default_factory=Counter)

    @classmethod
    def from_environment(cls) -> Redactor:
        return cls(env_secrets())

    def __call__(self, text: str) -> str:
        if not text:
            return text
        for value in self.env_values:
            if value in text:
                self.counts["environment_value"] += text.count(value)
                text = text.replace(value, "[REDACTED:environment_value]")
        low = text.lower()
        if not any(t in low for t in _TRIGGERS):
            return text
        for kind, rx in _COMPILED:
            text = rx.sub(self._replacer(kind), text)
        return text

    def _replacer(self, kind: str) -> Callable[[re.Match[str]], str]:
        def sub(m: re.Match[str]) -> str:
            self.counts[kind] += 1
            keep = m.group(1) if m.re.groups else ""
            return f"{keep}[REDACTED:{kind}]"

        return sub
