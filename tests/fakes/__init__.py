"""Fakes of the systems at gpu-k8s's boundary: the machine, the Kubernetes API, AWS.

Every HTTP fake's handler sets TCP_NODELAY (`disable_nagle_algorithm`, or a `setsockopt`
in its `setup`), as Go's net package does on every connection of kube-apiserver and etcd.
`BaseHTTPRequestHandler` sends the headers and the body in two writes; on a keep-alive
connection Nagle's algorithm holds the second until the client acknowledges the first,
and Linux delays that acknowledgement by up to 40 ms: every response of the AWS proxy
waited that long (measured in the style review of 2026-11-26: 36-60 ms per call, 13-15 ms
without it).
"""
