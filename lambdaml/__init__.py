"""LambdaML: distributed ML training on serverless functions, compared honestly with IaaS."""

__version__ = "0.1.0"
