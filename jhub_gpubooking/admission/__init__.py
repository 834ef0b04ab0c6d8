"""Kubernetes admission webhook: GPU pods created outside the Hub need a booking too.

- :mod:`.rules`: pure governance of GPU requests (whole numbers, requests = limits, backend rules)
  and booking coverage;
- :mod:`.patch`: pure JSONPatch builder (booking annotations, node pinning, deadline);
- :mod:`.review`: pure decisions (pod owner, covering booking, AdmissionReview answers);
- :mod:`.server`: Tornado handlers and the TLS server, run inside the booking service.
"""
