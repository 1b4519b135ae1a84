"""Analytic time/cost model of FaaS and IaaS training (pure Python, no boto3).

The model itself arrives with its own issue; this package exists so the layout, the
linters and the type checker cover it from the start.
"""
