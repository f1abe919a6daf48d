"""webhook.settings: ReceiverSettings.from_env."""

from __future__ import annotations

import pytest

from webhook.settings import DEFAULT_MAX_BODY_BYTES, ReceiverSettings, SettingsError


def test_defaults() -> None:
    s = ReceiverSettings.from_env({"THE_LOOP_WEBHOOK_SECRET": "s3cret"})
    assert s.secrets == (b"s3cret",)
    assert s.redis_url == "redis://127.0.0.1:6379/0"
    assert s.queue_name == "the-loop"
    assert s.redis_prefix == "the-loop"
    assert s.max_body_bytes == DEFAULT_MAX_BODY_BYTES == 26214400


def test_all_variables() -> None:
    s = ReceiverSettings.from_env(
        {
            "THE_LOOP_WEBHOOK_SECRET": "new, ,old,",
            "REDIS_URL": "redis://:pw@redis.internal:6380/3",
            "THE_LOOP_QUEUE": "q1",
            "THE_LOOP_REDIS_PREFIX": "p1",
            "THE_LOOP_MAX_BODY_BYTES": "1024",
        }
    )
    assert s.secrets == (b"new", b"old")
    assert (s.redis_url, s.queue_name, s.redis_prefix, s.max_body_bytes) == (
        "redis://:pw@redis.internal:6380/3", "q1", "p1", 1024,
    )


@pytest.mark.parametrize("value", [None, "", " , ,"])
def test_missing_secret_names_variable(value: str | None) -> None:
    env = {} if value is None else {"THE_LOOP_WEBHOOK_SECRET": value}
    with pytest.raises(SettingsError, match="THE_LOOP_WEBHOOK_SECRET") as info:
        ReceiverSettings.from_env(env)
    assert "export" in str(info.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("THE_LOOP_MAX_BODY_BYTES", "lots"),
        ("THE_LOOP_MAX_BODY_BYTES", "-1"),
        ("REDIS_URL", "http://example.com"),
        ("THE_LOOP_QUEUE", "has space"),
        ("THE_LOOP_REDIS_PREFIX", "glob*"),
    ],
)
def test_invalid_values_name_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name) as info:
        ReceiverSettings.from_env({"THE_LOOP_WEBHOOK_SECRET": "topsecret", name: value})
    assert "topsecret" not in str(info.value)


def test_secrets_and_redis_password_not_in_repr() -> None:
    s = ReceiverSettings.from_env(
        {"THE_LOOP_WEBHOOK_SECRET": "topsecret,oldsecret",
         "REDIS_URL": "redis://user:hunter2@h:6379/0"}
    )
    text = repr(s) + str(s)
    for secret in ("topsecret", "oldsecret", "hunter2"):
        assert secret not in text
    assert "2 hidden" in text
