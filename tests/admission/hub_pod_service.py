"""``python tests/hub_pod_service.py SERVICE_ACCOUNT_DIR [service options]``: the booking service
as the hub pod runs it, with the pod's service-account volume in another folder.

Kubernetes mounts the service account's token and CA at /var/run/secrets/kubernetes.io/
serviceaccount/ in every pod; a test cannot write there, so this points kubernetes_asyncio's
in-cluster config at SERVICE_ACCOUNT_DIR and then runs ``jhub-gpubooking-service``. Everything
else is the real in-cluster path: KUBERNETES_SERVICE_HOST/PORT come from the environment the Hub
gives the service, and the API is reached over HTTPS, checked against that CA.
"""

import sys
from pathlib import Path

from kubernetes_asyncio.config import incluster_config

from jhub_gpubooking.service.app import main

if __name__ == "__main__":
    folder = Path(sys.argv.pop(1))
    incluster_config.SERVICE_TOKEN_FILENAME = str(folder / "token")
    incluster_config.SERVICE_CERT_FILENAME = str(folder / "ca.crt")
    main()
