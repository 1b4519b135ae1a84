"""Loading a finished job's model: by job id, from its result, or from the model's ``s3://`` URI.

Only a model that can be right is returned. The job must have succeeded. The card must be of a
format this build reads, and the bundle must be the one the card's SHA-256 names. A model of a
failed job, a damaged bundle or a card from a newer LambdaML is refused in one line, never
loaded half-way.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lambdaml import codec, keys
from lambdaml.channels import Channel
from lambdaml.config import StorageSpec
from lambdaml.errors import CodecError, ConfigError, DataError, KeyNotFound
from lambdaml.models.card import ModelCard, bundle_hash
from lambdaml.runtime.records import SUCCEEDED, status
from lambdaml.runtime.reports import JobResult
from lambdaml.storage import get_json, open_storage
from lambdaml.trained.model import TrainedModel

if TYPE_CHECKING:
    from lambdaml.arrays import Array

log = logging.getLogger(__name__)


def load_model(source: str | JobResult, *, storage: StorageSpec | Channel | None = None) -> TrainedModel:
    """The model of a finished job: ``source`` is its id, its ``JobResult`` or ``s3://BUCKET/jobs/ID/model``.

    ``storage`` is the data bucket (a ``StorageSpec`` or an open store); for a ``JobResult`` it
    defaults to the job's own storage, and for an ``s3://`` URI the URI's bucket is read through
    the given spec's endpoint and region.
    """
    if isinstance(source, JobResult):
        job_id = source.job_id
        spec = storage if storage is not None else StorageSpec.model_validate(source.spec.get("storage", {}))
    elif keys.is_s3_uri(source):
        bucket, key = keys.split_s3_uri(source)
        found = keys.job_of_model(key)
        if found is None:
            raise ConfigError(f"{source} is not a job's model (s3://BUCKET/jobs/JOB_ID/model)")
        job_id = found
        if isinstance(storage, Channel):
            raise ConfigError("an s3:// model URI names its bucket: give storage as a StorageSpec (endpoint, region)")
        spec = (storage or StorageSpec(bucket=bucket)).model_copy(update={"bucket": bucket})
    else:
        job_id = keys.check_name(source, "job id")
        spec = storage if storage is not None else StorageSpec()
    store = open_storage(spec) if isinstance(spec, StorageSpec) else spec
    return read_model(store, job_id, result=source if isinstance(source, JobResult) else None)


def read_model(store: Channel, job_id: str, *, result: JobResult | None = None) -> TrainedModel:
    """Read and check a job's card and bundle from the data bucket."""
    record = status(store, job_id)
    state = record.state
    if state == "unknown":
        raise DataError(f"no job {job_id!r} in {store.describe()} (see: lambdaml jobs)")
    if state != SUCCEEDED:
        raise DataError(f"job {job_id} is {state}, not succeeded: it has no model to use")
    card = _card(store, job_id)
    try:
        bundle = store.get(keys.job_model(job_id))
    except KeyNotFound:
        raise DataError(f"job {job_id} has no model bundle ({keys.job_model(job_id)}): it was deleted") from None
    if bundle_hash(bundle) != card.bundle_sha256:
        raise DataError(
            f"the model bundle of job {job_id} ({keys.job_model(job_id)}) fails its checksum: "
            "it is damaged or not the one its card describes"
        )
    params = _params(bundle, keys.job_model(job_id))
    if result is None:
        result = _result(store, job_id)
    return TrainedModel(card, params, result)


def _card(store: Channel, job_id: str) -> ModelCard:
    key = keys.job_model_card(job_id)
    try:
        raw = get_json(store, key)
    except KeyNotFound:
        raise DataError(
            f"job {job_id} has no model card ({key}): it was trained by an older LambdaML; train it again"
        ) from None
    except CodecError as exc:
        raise DataError(str(exc)) from None
    try:
        card = ModelCard.from_json(raw, key)
    except CodecError as exc:
        raise DataError(str(exc)) from None
    if card.job_id != job_id:
        raise DataError(f"{key} describes the model of job {card.job_id!r}, not {job_id!r}")
    return card


def _params(bundle: bytes, key: str) -> Array:
    try:
        arrays = codec.decode_bundle(bundle, what=key)
    except CodecError as exc:
        raise DataError(str(exc)) from None
    params = arrays.get("params")
    if params is None or params.ndim != 1:
        raise DataError(f"{key} holds no flat parameter vector")
    return params.copy()  # its own memory: the bundle's bytes go


def _result(store: Channel, job_id: str) -> JobResult | None:
    """The job's result record, for its spec and metrics; a model is usable without it."""
    try:
        return JobResult.from_json(get_json(store, keys.job_result(job_id)), keys.job_result(job_id))
    except (KeyNotFound, CodecError) as exc:
        log.warning("job %s: no readable result record (%s); its metrics are unknown", job_id, exc)
        return None


__all__ = ["load_model", "read_model"]
