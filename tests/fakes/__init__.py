"""Fakes of the systems at gpu-k8s's boundary: the machine, the Kubernetes API, AWS."""
