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
    initial_wait_s: float = Field(1.0, ge=0)
    max_wait_s: float = Field(60.0, ge=0)
    jitter_s: float = Field(1.0, ge=0)


class Budget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_requests: int | None = Field(None, ge=0)


class LLMSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    provider: str = Field(description="'openai:<model>', 'anthropic:<model>', 'ollama:<model>' or 'synthetic:<profile>'")
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float | None = 0.0
    max_tokens: int | None = 512
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
               "extra": {k: v for k, v in sorted(self.extra.items()) if "key" not in k.lower()}}
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
    requests_per_second: float | None = Field(None, gt=0)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    timeout_s: float = Field(120.0, gt=0)
    lease_s: float = Field(600.0, ge=1.0, description="claim lease; a heartbeat renews it every lease_s / 3 while "
                                                       "the collector lives, so any retry schedule is safe")
    budget: Budget = Field(default_factory=Budget)
    retry_failed: bool = False

    @model_validator(mode="after")
    def _check(self) -> "RunSpec":
        from ..core.vocab import INTERVENTIONS, STRATEGIES
        if self.design == "cue" and self.strategies:
            raise ValueError("'strategies' belongs to design l2d; use 'interventions' for design cue")
        if self.design == "l2d" and self.interventions:
            raise ValueError("'interventions' belongs to design cue; use 'strategies' for design l2d")
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


def load_spec(path: str | Path) -> RunSpec:
    """Read and validate a YAML run spec; `SpecError` names the file and the bad field."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
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
