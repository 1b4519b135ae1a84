"""The model card (``jobs/ID/model.json``): what it must hold to be read, and the keys that name a job's model.

A card from a newer LambdaML, or one with a field that is not what this build wrote, is refused
in one line naming the card and the field, before any model is built from it; a card that
parses but describes no model this build can make is refused when the model is built.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest

from lambdaml import keys
from lambdaml.errors import CodecError, ConfigError, DataError
from lambdaml.models.card import MODEL_FORMAT, ModelCard, bundle_hash
from lambdaml.trained import TrainedModel

WHAT = "jobs/j-1/model.json"


def card_data(**changes: Any) -> dict[str, Any]:
    """A card as rank 0 writes it for LR on 3 features labelled -1/+1, changed as given."""
    data: dict[str, Any] = {
        "job_id": "j-1",
        "model": {"name": "lr", "l2": 0.0001},
        "n_features": 3,
        "n_classes": 2,
        "label_values": [-1.0, 1.0],
        "sample_shape": None,
        "data_format": "dense",
        "dataset": "cancer",
        "dataset_version": "v1",
        "n_params": 4,
        "bundle_sha256": bundle_hash(b"bundle"),
        "format": MODEL_FORMAT,
    }
    data.update(changes)
    return data


def refusal(data: Any) -> str:
    with pytest.raises(CodecError) as refused:
        ModelCard.from_json(data, WHAT)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(WHAT), message
    return message


def test_a_card_round_trips_through_json() -> None:
    card = ModelCard.from_json(card_data(), WHAT)
    assert card.name == "lr" and card.format == MODEL_FORMAT == 1
    assert ModelCard.from_json(card.to_json(), WHAT) == card
    assert card.to_json() == card_data()
    assert card.bundle_sha256 == hashlib.sha256(b"bundle").hexdigest() != bundle_hash(b"other")


def test_a_card_from_a_newer_lambdaml_is_refused_by_its_format() -> None:
    message = refusal(card_data(format=MODEL_FORMAT + 1, new_field="what a later format adds"))
    assert message == (
        f"{WHAT} is model format {MODEL_FORMAT + 1}, newer than this LambdaML reads ({MODEL_FORMAT}); "
        "upgrade lambdaml to use it"
    )


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ([1, 2], "is not a model card: it holds [1, 2]"),
        ("card", "is not a model card: it holds 'card'"),
        (card_data(format=None), "has model format None, expected a positive integer"),
        ({k: v for k, v in card_data().items() if k != "format"}, "has model format None, expected a positive integer"),
        (card_data(format="1"), "has model format '1', expected a positive integer"),
        (card_data(format=True), "has model format True, expected a positive integer"),
        (card_data(format=0), "has model format 0, expected a positive integer"),
        (card_data(format=1.0), "has model format 1.0, expected a positive integer"),
    ],
)
def test_a_card_without_a_readable_format_is_refused(data: Any, expected: str) -> None:
    assert refusal(data) == f"{WHAT} {expected}"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"model": "lr"}, "model is 'lr', expected a model spec with a name"),
        ({"model": {"l2": 0.1}}, "model is {'l2': 0.1}, expected a model spec with a name"),
        ({"n_features": 0}, "n_features, n_classes and n_params must be positive integers"),
        ({"n_features": "3"}, "n_features, n_classes and n_params must be positive integers"),
        ({"n_classes": True}, "n_features, n_classes and n_params must be positive integers"),
        ({"n_params": 2**62}, "n_features, n_classes and n_params must be positive integers"),
        ({"label_values": [1.0]}, "label_values is [1.0], expected one increasing number per class"),
        ({"label_values": "-1,1"}, "label_values is '-1,1', expected one increasing number per class"),
        ({"label_values": [-1, True]}, "label_values is [-1, True], expected one increasing number per class"),
        ({"label_values": [1.0, -1.0]}, "label_values is [1.0, -1.0], expected one increasing number per class"),
        ({"label_values": [1.0, 1.0]}, "label_values is [1.0, 1.0], expected one increasing number per class"),
        ({"label_values": [0.0, float("nan")]}, "label_values is [0.0, nan], expected one increasing number per class"),
        ({"sample_shape": "1x3"}, "sample_shape is '1x3', expected positive integers"),
        ({"sample_shape": [1, 0, 3]}, "sample_shape is [1, 0, 3], expected positive integers"),
        ({"sample_shape": []}, "sample_shape is [], expected positive integers"),
        ({"data_format": "coo"}, "data_format is 'coo'"),
        ({"bundle_sha256": "abc"}, "bundle_sha256 is not a SHA-256"),
        ({"bundle_sha256": None}, "bundle_sha256 is not a SHA-256"),
        ({"job_id": 7}, "job_id is 7, expected a string"),
        ({"dataset": None}, "dataset is None, expected a string"),
        ({"dataset_version": 2}, "dataset_version is 2, expected a string"),
    ],
)
def test_a_malformed_field_is_refused_by_name(changes: dict[str, Any], expected: str) -> None:
    assert refusal(card_data(**changes)) == f"{WHAT} is not a valid model card: {expected}"


def test_missing_and_unknown_fields_are_refused() -> None:
    missing = refusal({k: v for k, v in card_data().items() if k != "n_params"})
    assert missing.startswith(f"{WHAT} is not a model card: ") and "n_params" in missing
    unknown = refusal(card_data(weights=[1, 2, 3]))
    assert unknown.startswith(f"{WHAT} is not a model card: ") and "weights" in unknown


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"model": {"name": "perceptron"}},
            "names a model this LambdaML does not build (name: unknown model 'perceptron'; known: ",
        ),
        ({"model": {"name": "lr", "l2": -1}}, "names a model this LambdaML does not build (l2: "),
        ({"model": {"name": "lr", "depth": 3}}, "names a model this LambdaML does not build (depth: "),
        ({"n_classes": 1, "label_values": None}, "model 'lr' tells classes apart, but the card has only 1"),
        (
            {"n_classes": 10, "label_values": None},
            "describes a model that cannot be built: model 'lr' is binary, but dataset 'cancer' has 10 classes",
        ),
    ],
)
def test_a_card_describing_no_model_this_build_makes_is_refused(changes: dict[str, Any], expected: str) -> None:
    card = ModelCard.from_json(card_data(**changes), WHAT)  # each field on its own is well-formed
    with pytest.raises(DataError) as refused:
        TrainedModel(card, np.zeros(card.n_params))
    message = str(refused.value)
    assert message.startswith("the model card of job j-1 ") and "\n" not in message and expected in message


def test_parameters_not_the_cards_size_are_refused() -> None:
    card = ModelCard.from_json(card_data(), WHAT)
    with pytest.raises(DataError) as refused:
        TrainedModel(card, np.zeros(5))
    assert str(refused.value) == "model of job j-1 has (5,) parameters; its card says 4"
    wrong = ModelCard.from_json(card_data(n_params=5), WHAT)
    with pytest.raises(DataError) as refused:
        TrainedModel(wrong, np.zeros(5))
    assert str(refused.value) == "model of job j-1: a lr of this shape has 4 parameters, the bundle 5"


def test_a_good_card_makes_a_model_that_predicts_the_files_labels() -> None:
    card = ModelCard.from_json(card_data(), WHAT)
    model = TrainedModel(card, np.array([1.0, -2.0, 0.0, 0.5]))
    assert model.classes_.tolist() == [-1, 1] and model.n_features == 3
    X = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 9.0]])
    assert model.predict(X).tolist() == [1, -1, 1]  # margins 1.5, -1.5, 0.5
    assert model.score(X, [1, -1, -1]) == pytest.approx(2 / 3)
    assert model.spec == {"model": {"name": "lr", "l2": 0.0001}} and model.metrics == {}


# --- keys --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "bucket", "key"),
    [
        ("s3://lambdaml-data/jobs/j-1/model", "lambdaml-data", "jobs/j-1/model"),
        ("s3://a.b-c/x", "a.b-c", "x"),
    ],
)
def test_split_s3_uri(uri: str, bucket: str, key: str) -> None:
    assert keys.is_s3_uri(uri)
    assert keys.split_s3_uri(uri) == (bucket, key)


@pytest.mark.parametrize(
    "uri",
    [
        "s3://bucket",  # no key
        "s3://bucket/",
        "s3://abc/dir/",  # a folder, not an object
        "s3:///jobs/j/model",  # no bucket
        "s3://Bucket/key",  # not a bucket name: capitals
        "s3://ab/key",  # too short
        "s3://-bucket/key",
        "s3://" + "b" * 64 + "/key",  # too long
        "http://bucket/key",
        "bucket/key",
    ],
)
def test_split_s3_uri_refuses_what_is_not_an_object_uri(uri: str) -> None:
    with pytest.raises(ConfigError) as refused:
        keys.split_s3_uri(uri)
    assert str(refused.value).endswith("is not an S3 object: write s3://BUCKET/KEY")


def test_job_of_model() -> None:
    assert keys.job_of_model(keys.job_model("j-1")) == "j-1"
    assert keys.job_of_model("jobs/my.job_2/model") == "my.job_2"
    for key in (
        "jobs/j-1/model.json",  # the card, not the bundle
        "jobs/j-1/result.json",
        "jobs/j-1/model/extra",
        "jobs//model",
        "jobs/../model",
        "jobs/" + "j" * 65 + "/model",
        "datasets/d/model",
        "xjobs/j-1/model",
        "jobs/j-1",
    ):
        assert keys.job_of_model(key) is None, key
    assert keys.job_model_card("j-1") == "jobs/j-1/model.json"
