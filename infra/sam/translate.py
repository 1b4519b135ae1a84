"""Translate template.yaml (SAM) into plain CloudFormation JSON, offline.

moto's CloudFormation has no SAM transform; aws-sam-translator (installed with aws-sam-cli
in .venv-sam, never in the main venv) does the transform locally, with no AWS call. Local
CodeUri paths are replaced by one S3 location (what `sam package` would upload), since
CloudFormation only takes code from S3. Run with .venv-sam's Python:

    .venv-sam/bin/python infra/sam/translate.py [-t template.yaml] [--code-uri s3://B/K.zip]
        [--region us-east-1] [--parameter ChannelCache=Redis ...] [-o out.json]

Importable too (from .venv-sam): translate(path, code_uri=..., region=..., parameters=...).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

DEFAULT_CODE_URI = "s3://lambdaml-local-code/functions.zip"
SERVERLESS_FUNCTION = "AWS::Serverless::Function"


def _s3_location(uri: str) -> dict[str, str]:
    if not uri.startswith("s3://") or "/" not in uri[5:]:
        raise ValueError(f"--code-uri must look like s3://BUCKET/KEY, not {uri!r}")
    bucket, key = uri[5:].split("/", 1)
    return {"Bucket": bucket, "Key": key}


def with_code_uri(template: dict[str, Any], code_uri: str) -> dict[str, Any]:
    """A copy of the SAM template whose local CodeUri paths point at code_uri instead."""
    location = _s3_location(code_uri)
    out = copy.deepcopy(template)
    for resource in (out.get("Resources") or {}).values():
        if resource.get("Type") != SERVERLESS_FUNCTION:
            continue
        props = resource.setdefault("Properties", {})
        code = props.get("CodeUri")
        if isinstance(code, str) and not code.startswith("s3://"):
            props["CodeUri"] = dict(location)
    return out


def translate(
    template_path: Path | str = "template.yaml",
    *,
    code_uri: str = DEFAULT_CODE_URI,
    region: str = "us-east-1",
    parameters: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The CloudFormation template (a dict) that the SAM transform would produce."""
    import boto3
    from samcli.yamlhelper import yaml_parse  # understands !Ref, !GetAtt, !Sub ...
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    sam_template = with_code_uri(yaml_parse(Path(template_path).read_text()), code_uri)
    # A session only tells the translator the region and partition; it makes no call.
    session = boto3.session.Session(region_name=region)
    translator = Translator(managed_policy_map=None, sam_parser=Parser(), boto_session=session)
    # No managed policy names are used (every function has its own role), so no IAM lookup.
    result: dict[str, Any] = translator.translate(
        sam_template, parameter_values=dict(parameters or {}), get_managed_policy_map=lambda: {}
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-t", "--template", type=Path, default=Path("template.yaml"))
    parser.add_argument("--code-uri", default=DEFAULT_CODE_URI, help="S3 location of the zip functions' code")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--parameter", action="append", default=[], metavar="KEY=VALUE", help="a parameter value")
    parser.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    args = parser.parse_args(argv)

    parameters: dict[str, str] = {}
    for item in args.parameter:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--parameter wants KEY=VALUE, not {item!r}")
        parameters[key] = value
    try:
        result = translate(args.template, code_uri=args.code_uri, region=args.region, parameters=parameters)
    except Exception as exc:  # the translator's InvalidDocumentException and friends: one line, exit 1
        print(f"translate: {args.template}: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(result, indent=1, sort_keys=False)
    if args.output:
        args.output.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
