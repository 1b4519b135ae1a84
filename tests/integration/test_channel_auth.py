"""Redis AUTH over TLS and memcached's text-protocol authentication, with the secret read from
the environment or from Secrets Manager (moto) and never written anywhere.

The servers are real: a redis-server that requires a password and speaks only TLS (with a
throwaway self-signed certificate made here), and a memcached started with ``-Y``.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lambdaml import aws, cli, keys
from lambdaml.channels import Channel, open_channel
from lambdaml.config import ChannelSpec, JobSpec, StorageSpec, parse_job
from lambdaml.data import shards, synthetic
from lambdaml.errors import ChannelUnavailable, ConfigError, LambdaMLError
from lambdaml.local import services
from lambdaml.runtime.start import job_secret
from lambdaml.storage import get_json
from tests.helpers import unique_name

pytestmark = pytest.mark.timeout(120)

PASSWORD = "s3cret-Pa55word-for-the-channel"  # must never appear in a log, a result or a stored spec
ENV = "LAMBDAML_TEST_CACHE_PASSWORD"


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, valid for a day, and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lambdaml test cache")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cache.crt", folder / "cache.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def secure_redis(tmp_path_factory: pytest.TempPathFactory, certificate: tuple[Path, Path]) -> Iterator[int]:
    """A redis-server that requires PASSWORD and speaks only TLS."""
    log = tmp_path_factory.mktemp("redis-tls") / "redis.log"
    server = services.start_redis(log_path=log, password=PASSWORD, tls=certificate)
    try:
        yield server.port
    finally:
        server.stop()


@pytest.fixture(scope="module")
def secure_memcached(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A memcached that requires user "lambdaml" with PASSWORD (``-Y``)."""
    folder = tmp_path_factory.mktemp("memcached-auth")
    (folder / "auth").write_text(f"lambdaml:{PASSWORD}\n")
    server = services.start_memcached(log_path=folder / "memcached.log", auth_file=folder / "auth")
    try:
        yield server.port
    finally:
        server.stop()


@pytest.fixture(scope="module")
def secret_arn(moto_url: str) -> str:
    """The password in Secrets Manager as the template stores it: JSON with a 'password'."""
    client = aws.client("secretsmanager", endpoint_url=moto_url)
    answer = client.create_secret(Name=unique_name("cache-auth"), SecretString=json.dumps({"password": PASSWORD}))
    return str(answer["ARN"])


def redis_spec(port: int, certificate: tuple[Path, Path], **auth: Any) -> ChannelSpec:
    fields: dict[str, Any] = {"kind": "redis", "port": port, "tls": True, "tls_ca_file": str(certificate[0])}
    return ChannelSpec(**fields, auth=auth or None, connect_timeout_s=2.0)


def round_trip(spec: ChannelSpec) -> None:
    with open_channel(spec) as channel:
        key = unique_name("auth") + "/value"
        channel.put(key, b"hello over an authenticated channel")
        assert channel.get(key) == b"hello over an authenticated channel"
        assert key in channel.list(key.rsplit("/", 1)[0])
        channel.delete([key])


def refusal(spec: ChannelSpec) -> str:
    with pytest.raises(LambdaMLError) as info:
        round_trip(spec)
    message = str(info.value)
    assert "\n" not in message and PASSWORD not in message
    return message


# --- Redis: AUTH and TLS ------------------------------------------------------------------


def test_redis_auth_over_tls_with_the_password_from_the_environment(
    secure_redis: int, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, PASSWORD)
    round_trip(redis_spec(secure_redis, certificate, secret_env=ENV))


def test_redis_with_the_password_from_secrets_manager(
    secure_redis: int, certificate: tuple[Path, Path], secret_arn: str, moto_url: str
) -> None:
    round_trip(redis_spec(secure_redis, certificate, secret_id=secret_arn, endpoint_url=moto_url))


def test_redis_wrong_missing_or_unverifiable(
    secure_redis: int, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, moto_url: str
) -> None:
    monkeypatch.setenv(ENV, "not-the-password")
    message = refusal(redis_spec(secure_redis, certificate, secret_env=ENV))
    assert "AUTH failed" in message and str(secure_redis) in message
    monkeypatch.delenv(ENV)
    assert "requires authentication (AUTH)" in refusal(redis_spec(secure_redis, certificate))
    assert f"environment variable {ENV} is not set" in refusal(redis_spec(secure_redis, certificate, secret_env=ENV))
    missing = refusal(redis_spec(secure_redis, certificate, secret_id="no-such-secret", endpoint_url=moto_url))
    assert "no secret 'no-such-secret'" in missing
    # TLS is verified: without the test CA the self-signed certificate is refused.
    monkeypatch.setenv(ENV, PASSWORD)
    spec = ChannelSpec(kind="redis", port=secure_redis, tls=True, auth={"secret_env": ENV}, connect_timeout_s=2.0)
    with pytest.raises(ChannelUnavailable, match="certificate verify failed"):
        round_trip(spec)
    # and a plain-text client cannot talk to the TLS port at all
    with pytest.raises(ChannelUnavailable):
        round_trip(ChannelSpec(kind="redis", port=secure_redis, auth={"secret_env": ENV}, connect_timeout_s=2.0))


# --- Memcached: text-protocol authentication ------------------------------------------------


def test_memcached_authentication(
    secure_memcached: int, secret_arn: str, moto_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = ChannelSpec(
        kind="memcached",
        port=secure_memcached,
        auth={"username": "lambdaml", "secret_id": secret_arn, "endpoint_url": moto_url},
        connect_timeout_s=2.0,
    )
    round_trip(spec)  # set, get, the key listing (its own connection) and delete all log in
    monkeypatch.setenv(ENV, "wrong")
    wrong = ChannelSpec(kind="memcached", port=secure_memcached, auth={"username": "lambdaml", "secret_env": ENV})
    assert "refused the credentials of user 'lambdaml'" in refusal(wrong)
    assert "requires authentication" in refusal(ChannelSpec(kind="memcached", port=secure_memcached))
    with pytest.raises(LambdaMLError, match="needs a user"):
        open_channel(ChannelSpec(kind="memcached", port=secure_memcached, auth={"secret_env": ENV}))


# --- a whole job: the secret is used, and appears nowhere -------------------------------------


def test_job_over_authenticated_tls_redis_leaves_the_secret_nowhere(
    secure_redis: int,
    certificate: tuple[Path, Path],
    secret_arn: str,
    data_store: tuple[StorageSpec, Channel],
    moto_url: str,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    storage, store = data_store
    X, y, _ = synthetic.higgs_like(400, seed=5)
    shards.prepare(store, "secured", X, y, shards=2)
    channel = redis_spec(secure_redis, certificate, secret_id=secret_arn, endpoint_url=moto_url).model_dump()
    job = {
        "name": "secured",
        "workers": 2,
        "dataset": "secured",
        "storage": storage.model_dump(),
        "channel": channel,
        "algorithm": {"epochs": 2, "batch_size": 50},
        "sync": {"timeout_s": 20},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    caplog.set_level(logging.DEBUG)  # botocore included: it logs response bodies at DEBUG

    code = cli.main(["-vv", "train", str(path), "--job-id", "secured-1", "--results-dir", str(tmp_path)])

    out, err = capfd.readouterr()
    assert code == 0, err
    result_file = (tmp_path / "secured-1.json").read_text()
    assert json.loads(result_file)["spec"]["channel"]["auth"]["secret_id"] == secret_arn  # where, not what
    stored = [
        json.dumps(get_json(store, keys.job_spec("secured-1"))),
        json.dumps(get_json(store, keys.job_result("secured-1"))),
    ]
    everything = [out, err, caplog.text, result_file, *stored]
    assert any("GetSecretValue" in text or "secretsmanager" in text for text in [caplog.text, err])  # it was read
    for text in everything:
        assert PASSWORD not in text


def test_a_job_file_with_the_secret_itself_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"dataset": "d", "channel": {"kind": "redis", "auth": {"password": PASSWORD}}}))
    from lambdaml.config import load_job

    with pytest.raises(ConfigError, match="a secret never goes in the job file") as info:
        load_job(path)
    assert PASSWORD not in str(info.value)


# --- integrity: auto keeps the MAC unless the server turns anonymous clients away ----------


def job_on(channel: ChannelSpec) -> JobSpec:
    return parse_job({"dataset": "unused", "channel": channel.model_dump()})


def test_a_redis_with_no_password_keeps_the_mac_although_auth_is_set(
    redis_port: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A server with no password set accepts any AUTH: values without a MAC could be forged by anyone."""
    monkeypatch.setenv(ENV, PASSWORD)
    spec = ChannelSpec(kind="redis", port=redis_port, auth={"secret_env": ENV}, connect_timeout_s=2.0)
    assert not spec.authenticates_values  # what the spec alone would say
    with open_channel(spec) as channel:
        assert not channel.refuses_anonymous_clients()
    with caplog.at_level(logging.WARNING, logger="lambdaml.runtime.start"):
        assert job_secret(job_on(spec)) is not None
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "lets in clients that do not authenticate" in said[0] and PASSWORD not in said[0]


def test_a_redis_that_requires_auth_goes_without_the_mac(
    secure_redis: int, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(ENV, PASSWORD)
    spec = redis_spec(secure_redis, certificate, secret_env=ENV)
    with open_channel(spec) as channel:
        assert channel.refuses_anonymous_clients()
    with caplog.at_level(logging.WARNING):
        assert job_secret(job_on(spec)) is None
    assert not caplog.records
    assert job_secret(job_on(spec.model_copy(update={"integrity": "mac"}))) is not None  # asked for: kept


def test_memcached_anonymous_clients_probe(
    secure_memcached: int, memcached_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, PASSWORD)
    auth = {"secret_env": ENV, "username": "lambdaml"}
    with open_channel(ChannelSpec(kind="memcached", port=secure_memcached, auth=auth)) as channel:
        assert channel.refuses_anonymous_clients()
    open_server = ChannelSpec(kind="memcached", port=memcached_port, auth=auth)
    with open_channel(open_server) as channel:
        assert not channel.refuses_anonymous_clients()
    assert job_secret(job_on(open_server)) is not None
