"""Collection run specs (YAML in ``collection/``), validated with pydantic.

Example::

    name: demo-cue
    design: cue                      # l2d | cue
    interventions: [C0]              # cue only
    llms:
      - name: sim-source-sensitive
        provider: synthetic:source-sensitive
      - name: qwen3-8b-vllm
        provider: openai:Qwen/Qwen3-8B
        base_url: http://127.0.0.1:8000/v1   # any OpenAI-compatible server (vLLM, llama.cpp, ...)
        api_key_env: VLLM_API_KEY            # the NAME of an environment variable; keys are never stored
        temperature: 0
        max_tokens: 256
        response_format: none                # or json_object / json_schema (OpenAI-compatible, Ollama)
    concurrency: 16                  # per LLM (all worker processes together)
    workers: 1                       # collector processes on this machine (use 2+ when the client CPU is the limit)
    requests_per_second: null        # LangChain InMemoryRateLimiter per LLM
    retry: {max_attempts: 6, initial_wait_s: 1, max_wait_s: 60, jitter_s: 1}
    timeout_s: 120
    budget: {max_requests: 100000}   # per run, all LLMs together
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..core.errors import SpecError

PROVIDERS = ("openai", "anthropic", "ollama", "synthetic")


class RetryPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_attempts: int = Field(6, ge=1, le=100)
    initial_wait_s: float = Field(1.0, ge=0, le=86_400, allow_inf_nan=False)
    max_wait_s: float = Field(60.0, ge=0, le=86_400, allow_inf_nan=False)
    jitter_s: float = Field(1.0, ge=0, le=3_600, allow_inf_nan=False)
    max_retry_after_s: float = Field(300.0, ge=0, le=86_400, allow_inf_nan=False,
                                     description="the longest wait a server's Retry-After gets (longer requests "
                                                 "are retried after this; the waits show in the progress line)")


class Budget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_requests: int | None = Field(None, ge=0)


class LLMSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    provider: str = Field(description="'openai:<model>', 'anthropic:<model>', 'ollama:<model>' or 'synthetic:<profile>'")
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float | None = Field(0.0, ge=0, le=100, allow_inf_nan=False)
    max_tokens: int | None = Field(512, ge=1, le=10_000_000)
    top_p: float | None = None
    seed: int | None = None
    extra: dict[str, Any] = Field(default_factory=dict, description="further keyword arguments for the chat model")
    profile_file: str | None = None
    http_client: Literal["auto", "aiohttp", "httpx", "direct"] = Field(
        "auto", description="HTTP layer of openai: LLMs: 'direct' (LangChain's ChatOpenAI with a plain aiohttp POST "
                            "in place of the SDK: the least CPU per request), 'aiohttp' (openai SDK on aiohttp), "
                            "'httpx' (the SDK's default transport; honours proxy variables), or 'auto' (the "
                            "default): 'direct' with a base_url (an OpenAI-compatible server), 'aiohttp' without")

    response_format: Literal["none", "json_object", "json_schema"] = Field(
        "none", description="ask the provider for JSON on the requests whose prompt asks for only a JSON object "
                            "(Design B letters; Design A numbers except CoT): 'json_object' (JSON mode) or "
                            "'json_schema' (the answer's schema: the option letters, or a number and the rating) on "
                            "openai: (OpenAI-compatible response_format) and ollama: (format); Anthropic's "
                            "Messages API has no JSON mode. Off by default: it changes what the model may write, so "
                            "it is part of the subject (its trial keys)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v.strip() or v != v.strip() or any(not ch.isprintable() for ch in v):
            raise ValueError(f"LLM name {v!r} must be printable text without leading or trailing spaces")
        return v

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, v: str | None) -> str | None:
        if v is not None and (v != v.strip() or any(ch.isspace() for ch in v)):
            raise ValueError(f"base_url {v!r} contains spaces or a line break; write the URL alone")
        return v

    @field_validator("extra")
    @classmethod
    def _extra(cls, v: dict[str, Any]) -> dict[str, Any]:
        for k in v:
            if looks_secret(k) and k not in HEADER_KEYS:
                raise ValueError(f"extra.{k}: a credential does not belong in the spec (it would be stored); put "
                                 f"the NAME of an environment variable holding it in api_key_env")
        return v

    @model_validator(mode="after")
    def _check_response_format(self) -> "LLMSpec":
        if self.response_format != "none" and self.kind == "anthropic":
            raise ValueError(f"response_format {self.response_format!r}: Anthropic's Messages API has no JSON mode; "
                             f"leave response_format 'none' (the strict and lenient parses read plain text)")
        if self.response_format != "none" and ("response_format" in self.extra or "format" in self.extra):
            raise ValueError("response_format is set twice (also in 'extra'); keep one")
        return self

    @property
    def http_layer(self) -> str:
        """The HTTP layer in use: ``http_client`` with 'auto' resolved."""
        if self.http_client != "auto":
            return self.http_client
        return "direct" if self.base_url else "aiohttp"

    @field_validator("provider")
    @classmethod
    def _provider(cls, v: str) -> str:
        kind, _, model = v.partition(":")
        if kind not in PROVIDERS or not model:
            raise ValueError(f"unknown provider {v!r}; use one of "
                             + ", ".join(f"'{p}:<model>'" for p in PROVIDERS[:3]) + " or 'synthetic:<profile>'")
        return v

    @property
    def kind(self) -> str:
        return self.provider.split(":", 1)[0]

    @property
    def model(self) -> str:
        return self.provider.split(":", 1)[1]

    def sampling_params(self) -> dict[str, Any]:
        """What identifies this subject's outputs (goes into every trial key); never a key."""
        out = {"provider": self.provider, "base_url": self.base_url, "temperature": self.temperature,
               "max_tokens": self.max_tokens, "top_p": self.top_p, "seed": self.seed,
               "extra": redact({k: v for k, v in sorted(self.extra.items()) if "key" not in k.lower()})}
        if self.response_format != "none":  # only when set: the trial keys of plain-text subjects stay as they were
            out["response_format"] = self.response_format
        return out

    def params_json(self) -> str:
        return json.dumps(self.sampling_params(), sort_keys=True)


class RunSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    design: Literal["l2d", "cue"]
    llms: list[LLMSpec] = Field(min_length=1)
    interventions: list[str] | None = None
    strategies: list[str] | None = None
    repeats: int = Field(1, ge=1, le=100)
    concurrency: int = Field(8, ge=1, le=1024)
    workers: int = Field(1, ge=1, le=64, description="collector processes on this machine; they share "
                                                      "`concurrency` and claim from the same database")
    requests_per_second: float | None = Field(None, ge=0.001, le=1_000_000, allow_inf_nan=False)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    timeout_s: float = Field(120.0, gt=0, le=86_400, allow_inf_nan=False)
    lease_s: float = Field(600.0, ge=1.0, le=7 * 86_400, allow_inf_nan=False,
                           description="claim lease; a heartbeat renews it every lease_s / 3 while "
                                       "the collector lives, so any retry schedule is safe")
    database_patience_s: float = Field(30.0, ge=0, le=86_400, allow_inf_nan=False,
                                       description="how long a database write is retried (back-off) before the "
                                                   "collector stops and keeps answered responses in its journal")
    budget: Budget = Field(default_factory=Budget)
    retry_failed: bool = False

    @model_validator(mode="after")
    def _check(self) -> "RunSpec":
        from ..core.vocab import INTERVENTIONS, STRATEGIES
        if self.design == "cue" and self.strategies:
            raise ValueError("'strategies' belongs to design l2d; use 'interventions' for design cue")
        if self.design == "l2d" and self.interventions:
            raise ValueError("'interventions' belongs to design cue; use 'strategies' for design l2d")
        if self.interventions is not None and not self.interventions:
            raise ValueError("interventions: [] names no intervention; list some (e.g. [C0]) or leave the key out "
                             "for C0 alone")
        if self.strategies is not None and not self.strategies:
            raise ValueError("strategies: [] names no strategy; list some or leave the key out for all")
        for iv in self.interventions or []:
            if iv not in INTERVENTIONS:
                raise ValueError(f"unknown intervention {iv!r}; expected some of {', '.join(INTERVENTIONS)}")
        for s in self.strategies or []:
            if s not in STRATEGIES:
                raise ValueError(f"unknown strategy {s!r}; expected some of {', '.join(STRATEGIES)}")
        names = [m.name for m in self.llms]
        if len(set(names)) != len(names):
            raise ValueError(f"LLM names must be unique; got {names}")
        return self


# header maps a chat model takes in ``extra`` (their values are secrets as often as not)
HEADER_KEYS = ("default_headers", "headers", "extra_headers")
_SECRET_WORDS = {"key", "apikey", "token", "secret", "password", "passwd", "auth", "authorization", "credential",
                 "credentials", "cookie", "bearer", "signature"}
_NOT_SECRET = {"api_key_env"}  # the NAME of an environment variable


def looks_secret(name: Any) -> bool:
    """A key naming a credential: one of its words (split at '_', '-', '.') is key, token, secret, ..."""
    n = str(name).lower()
    return n not in _NOT_SECRET and bool(set(n.replace("-", "_").replace(".", "_").split("_")) & _SECRET_WORDS)


def redact(obj: Any, *, hide: bool = False) -> Any:
    """``obj`` with every header value (under ``default_headers`` / ``headers`` / ``extra_headers``) and
    every value under a credential-like key (`looks_secret`) replaced by '***'; the names stay, so
    what was set is still on record."""
    if isinstance(obj, dict):
        return {k: redact(v, hide=hide or str(k) in HEADER_KEYS or looks_secret(k)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v, hide=hide) for v in obj]
    return "***" if hide and obj is not None else obj


def redacted_spec_json(spec: "RunSpec") -> str:
    """The spec as stored in ``run.spec_json`` and printed: `redact` applied to it."""
    return json.dumps(redact(spec.model_dump(mode="json")), sort_keys=False)


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader that refuses a mapping with a key given twice (plain YAML keeps the last)."""


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice (lines {seen[key] + 1} and {key_node.start_mark.line + 1})",
                key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def load_spec(path: str | Path) -> RunSpec:
    """Read and validate a YAML run spec; `SpecError` names the file and the bad field."""
    p = Path(path)
    try:
        data = yaml.load(p.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except FileNotFoundError:
        raise SpecError(f"spec file {p} does not exist") from None
    except IsADirectoryError:
        raise SpecError(f"spec {p} is a directory; give a YAML file, e.g. collection/demo_cue.yaml") from None
    except PermissionError:
        raise SpecError(f"spec file {p} cannot be read (permission denied)") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"spec file {p} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"spec file {p} is not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise SpecError(f"spec file {p} must hold a mapping at the top level")
    return spec_from_dict(data, source=str(p))


def spec_from_dict(data: dict[str, Any], source: str = "<spec>") -> RunSpec:
    try:
        return RunSpec.model_validate(data)
    except ValidationError as exc:
        msgs = []
        for e in exc.errors():
            loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
            msg = e["msg"]
            if e["type"] == "extra_forbidden":
                msg = f"unknown key {e['loc'][-1]!r}"
            msgs.append(f"{loc}: {msg}")
        raise SpecError(f"invalid spec {source}: " + "; ".join(msgs)) from None
