"""Rank 0's trained model: its bundle and card in the data bucket, and its scores on the test split."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lambdaml import codec, keys
from lambdaml.arrays import Array
from lambdaml.channels import Channel
from lambdaml.comm.base import check_finite
from lambdaml.config import JobSpec
from lambdaml.data.shards import Manifest, load_test
from lambdaml.models.base import Model
from lambdaml.models.card import ModelCard, bundle_hash
from lambdaml.runtime.reports import Accuracy
from lambdaml.storage import put_json


@dataclass(frozen=True)
class SavedModel:
    """Where rank 0's model went, and how it scores on the test set (None: the dataset has no test split)."""

    model_uri: str | None = None
    test_loss: float | None = None
    accuracy: Accuracy | None = None  # a supervised model's


def save_model(
    store: Channel, job: JobSpec, job_id: str, manifest: Manifest, model: Model, params: Array, rank: int
) -> SavedModel:
    """Put the model's bundle and card in the data bucket, then score it on the test split."""
    model_key = keys.job_model(job_id)
    check_finite(params, rank, "model")
    bundle = codec.encode_bundle({"params": params})
    store.put(model_key, bundle)
    put_json(store, keys.job_model_card(job_id), model_card(job, job_id, manifest, bundle, len(params)).to_json())
    model_uri = f"s3://{job.storage.bucket}/{model_key}"
    test = load_test(store, manifest)
    if test is None:
        return SavedModel(model_uri)
    test_loss = model.mean_loss(params, *test)
    accuracy = None
    if model.supervised:
        accuracy = Accuracy(
            test_accuracy=model.accuracy(params, *test),
            classes=manifest.n_classes,
            majority_accuracy=_majority_share(test[1]),
        )
    return SavedModel(model_uri, test_loss, accuracy)


def _majority_share(labels: Array) -> float | None:
    """The accuracy of always answering the most common label: what a classifier must beat."""
    if not len(labels) or not np.all(labels == np.round(labels)) or labels.min() < 0:
        return None
    return float(np.bincount(labels.astype(np.int64)).max() / len(labels))


def model_card(job: JobSpec, job_id: str, manifest: Manifest, bundle: bytes, n_params: int) -> ModelCard:
    """What rank 0's model bundle is: enough to use it without the dataset (lambdaml.trained)."""
    return ModelCard(
        job_id=job_id,
        model=job.model.model_dump(mode="json"),
        n_features=manifest.n_features,
        n_classes=manifest.n_classes,
        label_values=manifest.label_values,
        sample_shape=manifest.sample_shape,
        data_format=manifest.format,
        dataset=manifest.name,
        dataset_version=manifest.dataset_version,
        n_params=n_params,
        bundle_sha256=bundle_hash(bundle),
    )
