"""Typed settings, loaded once at start: a YAML file, overridden by ``TRAINGUARD_*`` variables.

Precedence, highest first: command-line flags (host, port, db), environment variables
(``TRAINGUARD_PORT``, nested with ``__`` as in ``TRAINGUARD_BREAKER__MAX_ACTIONS``), the YAML file,
the defaults below. Secrets (the webhook and operator tokens) come from the environment or from a
file, never from the command line. An invalid value stops the start with a message that names the
key and the value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from responder.alertmanager import AlertmanagerSettings, SilenceSettings
from responder.approval import ApprovalSettings
from responder.breaker import BreakerSettings
from responder.errors import ConfigError
from responder.isolation import LedgerSettings
from responder.loki import LokiSettings
from responder.model import Mode
from responder.node_groups import NodeGroups
from responder.policy import PolicySettings
from responder.schedulers.router import SchedulerSettings
from responder.store.config import StoreSettings
from responder.store.retention import RetentionSettings
from trainguard.identity import IdentityError, validate_cluster


class ClusterSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Mode = Field(Mode.MONITOR, description="initial mode; a mode set through the API is persisted")
    nodes: int | None = Field(None, ge=1, description="cluster size, for the breaker's node share")
    policy: PolicySettings = Field(default_factory=PolicySettings)
    approval: ApprovalSettings = Field(default_factory=ApprovalSettings, description="approve mode's waits")
    silences: SilenceSettings = Field(default_factory=SilenceSettings, description="Alertmanager silences, off")
    node_groups: NodeGroups = Field(default_factory=list, description="parts with own mode, policy")
    scheduler: SchedulerSettings | None = Field(
        None, description="scheduler adapter settings, e.g. {kind: slurm, ...}; none: act mode fails safe"
    )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="TRAINGUARD_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    host: str = Field("127.0.0.1", description="address to listen on")
    port: int = Field(9480, ge=1, le=65535, description="port to listen on")
    tls_certfile: Path | None = Field(None, description="PEM certificate: serve HTTPS (uvicorn's own TLS)")
    tls_keyfile: Path | None = Field(None, description="PEM private key for tls_certfile")
    db_path: Path = Field(Path("trainguard.db"), description="SQLite audit store (WAL)")
    store: StoreSettings = Field(default_factory=StoreSettings, description="store.url: PostgreSQL for replicas")
    webhook_token: SecretStr | None = Field(None, description="bearer token Alertmanager must send")
    webhook_token_file: Path | None = Field(None, description="file holding the webhook token")
    operator_token: SecretStr | None = Field(None, description="token for mode changes and reviews")
    operator_token_file: Path | None = Field(None, description="file holding the operator token")
    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024, description="largest webhook body accepted")
    correlation_window_s: float = Field(1.0, ge=0, le=300, description="gather evidence this long")
    default_mode: Mode = Field(Mode.MONITOR, description="mode of clusters not listed under clusters")
    prometheus_url: str | None = Field(None, description="Prometheus for enrichment; none: alerts only")
    prometheus_timeout_s: float = Field(2.0, gt=0, description="enrichment query timeout")
    clusters: dict[str, ClusterSettings] = Field(default_factory=dict)
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    ledger: LedgerSettings = Field(default_factory=LedgerSettings)
    loki: LokiSettings | None = Field(None, description="mirror the audit trail to Loki or VictoriaLogs; none: off")
    alertmanager: AlertmanagerSettings | None = Field(None, description="post own alerts and silences; none: off")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    allowed_hosts: list[str] = Field(
        default_factory=list, description="Host names served besides IP literals and localhost ('*.x' allowed)"
    )
    read_token: SecretStr | None = Field(None, description="token the audit API and console then require")
    read_token_file: Path | None = Field(None, description="file holding the read token")
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    store_busy_timeout_s: float = Field(2.0, gt=0, le=60, description="longest wait for the store; then 503")
    loop_stall_after_s: float = Field(60.0, gt=0, description="/healthz fails after the loop fails this long")
    action_retry_s: float = Field(
        600.0, ge=0, description="an action whose scheduler cannot be reached is tried again this long; then failed"
    )

    @field_validator("clusters")
    @classmethod
    def _cluster_names(cls, value: dict[str, ClusterSettings]) -> dict[str, ClusterSettings]:
        for name in value:
            try:
                validate_cluster(name)
            except IdentityError as exc:
                raise ValueError(str(exc)) from exc
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Flags (init) beat the environment, which beats the YAML file (passed as defaults below).
        return (init_settings, env_settings)

    def schedulers(self) -> dict[str, SchedulerSettings | None]:
        """Each configured cluster's scheduler settings (``build_schedulers`` takes these)."""
        return {name: cluster.scheduler for name, cluster in self.clusters.items()}

    def cluster(self, name: str) -> ClusterSettings:
        return self.clusters.get(name) or ClusterSettings(mode=self.default_mode)

    def webhook_secret(self) -> str | None:
        return _secret(self.webhook_token, self.webhook_token_file, "webhook_token_file")

    def operator_secret(self) -> str | None:
        return _secret(self.operator_token, self.operator_token_file, "operator_token_file")

    def read_secret(self) -> str | None:
        return _secret(self.read_token, self.read_token_file, "read_token_file")


def _secret(value: SecretStr | None, path: Path | None, key: str) -> str | None:
    if value is not None:
        return value.get_secret_value()
    if path is None:
        return None
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc.strerror}") from exc
    if not token:
        raise ConfigError(f"{key}: {path} is empty")
    return token


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Settings from an optional YAML file, the environment and explicit overrides (flags)."""
    file_values: dict[str, Any] = {}
    if config_file is not None:
        try:
            loaded = yaml.safe_load(config_file.read_text())
        except OSError as exc:
            raise ConfigError(f"config file {config_file}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {config_file} is not valid YAML: {exc}") from exc
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {config_file}: expected a mapping at the top level")
        file_values = loaded
    flags = {key: value for key, value in overrides.items() if value is not None}
    try:
        # The YAML values are defaults the environment may override key by key, then the flags.
        from_env = EnvSettingsSource(Settings)()
        merged = _deep_merge(_deep_merge(file_values, from_env), flags)
        return Settings(**merged)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from exc


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        key = ".".join(str(part) for part in err["loc"]) or "(top level)"
        value = err.get("input")
        lines.append(f"{key}: {err['msg']} (got {value!r})")
    return "invalid configuration:\n  " + "\n  ".join(lines)
