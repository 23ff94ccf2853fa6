"""TensorFlow Serving's REST API over a model base path, for tests (no C++ server here).

What the charm uses of tensorflow/serving 2.20.0 (tensorflow_serving/g3doc/api_rest.md):
- `GET /v1/models/<name>`: GetModelStatusResponse as JSON, `model_version_status` with
  `version` (a string), `state` (AVAILABLE once loaded) and `status`.
- Until a first version loaded, no answer at all: the server creates its HTTP listener
  only after its models are available (model_servers/server.cc BuildAndStart), so the
  API server's service proxy answers 503; the fake answers 503 itself.
- `GET /v1/models/<name>/metadata`: GetModelMetadataResponse, the signature map under
  `metadata.signature_def.signature_def`, each input's `tensor_shape.dim[].size` a string
  (proto3 JSON of int64).
- `POST /v1/models/<name>:predict` with `{"instances": [...]}` (row format): `predictions`,
  one object per instance when the signature has several named outputs; an unknown model
  answers 404 `{"error": "Servable not found for request: Latest(<name>)"}`
  (core/basic_manager.cc).
The served version is the highest numbered directory, whatever it holds: the file system
source aspires it without looking inside (sources/storage_path/
file_system_storage_path_source.cc AspireLatestVersions), so a half-written one (no
`saved_model.pb` yet) fails to load: at start the server never comes up, later the
version it loaded before keeps serving.

The model is real when TensorFlow is importable (tf.saved_model.load, the version's
`serving_default` signature); otherwise `predict` and `width` describe it (unit tests).
`loading_polls` answers LOADING that many times first, as a server still loading does.
`shape` is the input's shape the metadata reports (default `[-1, width]`), e.g. an image
model's `(-1, 28, 28, 1)`.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fakes import serving


class FakeTfServing:
    """`with FakeTfServing(name, base_path) as server:` serves at `server.url`."""

    def __init__(
        self,
        name: str,
        base_path: Path,
        *,
        predict: Callable[[list], list] | None = None,
        width: int = 0,
        loading_polls: int = 0,
        shape: tuple[int, ...] | None = None,
    ):
        self.name, self.base_path, self.shape = name, base_path, shape
        self.predict, self.width, self.loading = predict, width, loading_polls
        self._models: dict[str, Any] = {}
        self.loaded: str | None = None
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # no 40 ms Nagle stall: tests/fakes/__init__.py

            def _answer(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802 (http.server's name)
                code, body = server.get(self.path)
                self._answer(code, body)

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                code, body = server.post(self.path, json.loads(self.rfile.read(length) or b"{}"))
                self._answer(code, body)

            def log_message(self, *args):
                pass

        self._httpd = serving.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> FakeTfServing:
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def latest(self) -> str | None:
        """The version being served: the highest numbered one, once it loaded (see above)."""
        numbered = [
            int(p.name)
            for p in (self.base_path.iterdir() if self.base_path.is_dir() else [])
            if p.name.isdigit()
        ]
        if numbered:
            top = str(max(numbered))
            if (self.base_path / top / "saved_model.pb").is_file():
                self.loaded = top
        return self.loaded

    def _signature(self, version: str):
        if version not in self._models:
            import tensorflow as tf

            model = tf.saved_model.load(str(self.base_path / version))
            self._models[version] = model.signatures["serving_default"]
        return self._models[version]

    def _real(self) -> bool:
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            return False
        return self.predict is None

    def get(self, path: str) -> tuple[int, dict]:
        """Model status and metadata."""
        version = self.latest()
        base = f"/v1/models/{self.name}"
        if path not in (base, base + "/metadata"):
            return 404, {"error": "Malformed request: GET " + path}
        if version is None:
            return 503, {"error": "no listener yet: no version of the model loaded"}
        if path == base:
            state = "AVAILABLE"
            if self.loading > 0:
                self.loading -= 1
                state = "LOADING"
            status = {"error_code": "OK", "error_message": ""}
            return 200, {
                "model_version_status": [{"version": version, "state": state, "status": status}]
            }
        width = self.width
        if self._real():
            spec = self._signature(version).structured_input_signature[1]["x"]
            width = int(spec.shape[1])
        dims = [{"size": str(d), "name": ""} for d in self.shape or (-1, width)]
        signature = {
            "inputs": {
                "x": {
                    "dtype": "DT_FLOAT",
                    "tensor_shape": {"dim": dims, "unknown_rank": False},
                    "name": "serving_default_x:0",
                }
            },
            "method_name": "tensorflow/serving/predict",
        }
        return 200, {
            "model_spec": {"name": self.name, "signature_name": "", "version": version},
            "metadata": {
                "signature_def": {
                    "@type": "type.googleapis.com/tensorflow.serving.SignatureDefMap",
                    "signature_def": {"serving_default": signature},
                }
            },
        }

    def post(self, path: str, body: dict) -> tuple[int, dict]:
        """Predict (row format)."""
        version = self.latest()
        if path != f"/v1/models/{self.name}:predict" or version is None:
            return 404, {"error": f"Servable not found for request: Latest({self.name})"}
        instances = body.get("instances")
        if not isinstance(instances, list):
            return 400, {"error": "Missing 'inputs' or 'instances' key"}
        if not self._real():
            assert self.predict is not None
            return 200, {"predictions": self.predict(instances)}
        import tensorflow as tf

        out = self._signature(version)(x=tf.constant(instances, tf.float32))
        names = sorted(out)
        rows = [
            {n: _as_written(out[n].numpy()[i], out[n].dtype == tf.float32) for n in names}
            for i in range(len(instances))
        ]
        return 200, {"predictions": rows}


def _as_written(value: Any, float32: bool) -> Any:
    """A tensor's values as TF Serving writes them in JSON (util/json_tensor.cc WriteDecimal).

    A float32 is written with six significant digits (absl::StrCat, printf `%g`), or with
    max_digits10 (9) when those do not read back as the same float32; the charm reads the
    JSON, so the Python float of that text is what it sees.
    """
    import numpy as np

    items = value.tolist()
    if not float32:
        return items

    def written(x: float) -> float:
        text = f"{x:g}"
        if np.float32(float(text)) != np.float32(x):
            text = f"{x:.9g}"
        return float(text)

    def walk(item: Any) -> Any:
        return [walk(x) for x in item] if isinstance(item, list) else written(item)

    return walk(items)
