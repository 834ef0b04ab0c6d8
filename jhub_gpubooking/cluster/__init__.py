"""Cluster integration of the booking service: Kubernetes access, the admission webhook, the
node inventory and the sweep for pods the Hub forgot, each a component of the service with its
own config section.

They run in the service process rather than as their own commands: they need the same
database and the same live (discovered) pools the REST API uses, and the service already runs
in the hub pod where z2jh keeps the database credentials.
"""
