"""POST /v1/jobs/{id}/predict over real HTTP against ``gradacc serve`` (a real worker and its
predict server): the answers equal ``transformers.pipeline`` on the downloaded model (labels and
scores to 1e-5, greedy text exactly), a checkpoint answers too, and bad requests are 4xx. A
model whose chat template loops on a trigger word fails that request at the render deadline and
the server answers the next one; a predict server killed with SIGKILL is started again by its
worker and answers."""

from __future__ import annotations

import io
import signal
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.e2e.conftest import embedded_serve
from tests.support import wait_final, wait_until
from trainer_core.spec.chat import CHATML_TEMPLATE

pytestmark = pytest.mark.integration
COMMON = {"num_train_epochs": 1, "max_train_samples": 64, "max_eval_samples": 8,
          "per_device_train_batch_size": 8, "gradient_accumulation_steps": 2,
          "learning_rate": 5e-3}  # fmt: skip
JOBS = {
    "classifier": {"model": "builtin:tiny-bert", "dataset": "builtin:sentiment"},
    "chat": {"model": "builtin:tiny-chat", "dataset": "builtin:chat-arithmetic",
             "task": "causal-lm"},
}  # fmt: skip
# ChatML, but a conversation ending in 'boom' first loops 10^10 times: trains like ChatML.
TRAP = (
    "{%- if messages[-1]['content'] == 'boom' -%}{%- for i in range(100000) -%}"
    "{%- for j in range(100000) -%}{%- endfor -%}{%- endfor -%}{%- endif -%}" + CHATML_TEMPLATE
)
JOBS["trap"] = {**JOBS["chat"], "chat_template": TRAP}
TEXTS = ["a wonderful, moving film", "dull and far too long", "it was fine"]
MESSAGES = [{"role": "user", "content": "what is 2 plus 3?"}]


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[httpx.Client, dict[str, str], Path]]:
    folder = tmp_path_factory.mktemp("predict")
    env = {"GRADACC_PREDICT_RENDER_TIMEOUT_S": "3"}
    with (
        embedded_serve(folder, env=env) as (url, _),
        httpx.Client(base_url=url, timeout=120) as client,
    ):
        ids = {}
        for name, job in JOBS.items():
            reply = client.post("/v1/jobs", json={**job, **COMMON})
            assert reply.status_code == 201, reply.text
            ids[name] = reply.json()["id"]
        for job_id in ids.values():
            assert wait_final(client, job_id, timeout=240)["status"] == "succeeded"
        yield client, ids, folder


def _model(client: httpx.Client, job_id: str, into: Path) -> Path:
    download = client.get(f"/v1/jobs/{job_id}/artifacts/model")
    assert download.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(download.content), mode="r:gz") as tar:
        tar.extractall(into, filter="data")
    (extracted,) = into.iterdir()
    return extracted


def test_labels_and_scores_equal_the_pipelines(served: Any, tmp_path: Path) -> None:
    from transformers import pipeline

    client, ids, _ = served
    reply = client.post(f"/v1/jobs/{ids['classifier']}/predict", json={"inputs": TEXTS})
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    assert answer["object"] == "list" and len(answer["data"]) == len(TEXTS)
    reference = pipeline("text-classification", model=str(_model(client, ids["classifier"], tmp_path)),
                         top_k=None, device="cpu")  # fmt: skip
    for got, expected in zip(answer["data"], reference(TEXTS), strict=True):
        best = max(expected, key=lambda e: e["score"])
        assert got["label"] == best["label"]
        assert got["score"] == pytest.approx(best["score"], abs=1e-5)
        assert got["scores"].keys() == {e["label"] for e in expected}
        for e in expected:
            assert got["scores"][e["label"]] == pytest.approx(e["score"], abs=1e-5)
    # The kept checkpoint answers as well (here: the last step's, the final weights).
    step = client.get(f"/v1/jobs/{ids['classifier']}/checkpoints").json()["data"][0]["step_number"]
    again = client.post(f"/v1/jobs/{ids['classifier']}/predict",
                        json={"inputs": TEXTS, "checkpoint": step})  # fmt: skip
    assert again.status_code == 200
    for a, b in zip(again.json()["data"], answer["data"], strict=True):
        assert a["label"] == b["label"] and a["score"] == pytest.approx(b["score"], abs=1e-6)


def test_greedy_text_equals_the_pipelines(served: Any, tmp_path: Path) -> None:
    from transformers import pipeline

    client, ids, _ = served
    generator = pipeline("text-generation", model=str(_model(client, ids["chat"], tmp_path)),
                         device="cpu")  # fmt: skip
    chat = client.post(f"/v1/jobs/{ids['chat']}/predict",
                       json={"messages": MESSAGES, "max_new_tokens": 16})  # fmt: skip
    assert chat.status_code == 200, chat.text
    expected = generator(MESSAGES, max_new_tokens=16, do_sample=False)[0]["generated_text"][-1]
    assert chat.json()["message"] == {"role": "assistant", "content": expected["content"]}
    assert chat.json()["text"] == expected["content"]
    prompt = "<|im_start|>user\nwhat is 7 plus 1?<|im_end|>\n<|im_start|>assistant\n"
    plain = client.post(f"/v1/jobs/{ids['chat']}/predict",
                        json={"prompt": prompt, "max_new_tokens": 12})  # fmt: skip
    assert plain.status_code == 200
    reference = generator(prompt, max_new_tokens=12, do_sample=False, return_full_text=False)
    assert plain.json()["text"] == reference[0]["generated_text"]
    assert "message" not in plain.json()


def test_bad_requests(served: Any) -> None:
    client, ids, _ = served
    cases = [
        (ids["chat"], {"inputs": ["x"]}, 422, "inputs"),
        (ids["classifier"], {"prompt": "x"}, 422, "inputs"),
        (ids["chat"], {"prompt": "x", "messages": MESSAGES}, 422, None),
        (ids["chat"], {"prompt": "x", "max_new_tokens": 513}, 422, "max_new_tokens"),
        (ids["classifier"], {"inputs": ["x"] * 33}, 422, "inputs"),
        (ids["classifier"], {"inputs": ["x" * 2001]}, 422, "inputs.0"),
        (ids["classifier"], {"inputs": ["x"], "checkpoint": 999}, 422, "checkpoint"),
        ("job_0123456789abcdef0123", {"inputs": ["x"]}, 404, "job_id"),
    ]
    for job_id, body, status, param in cases:
        reply = client.post(f"/v1/jobs/{job_id}/predict", json=body)
        assert reply.status_code == status, (body, reply.text)
        assert reply.json()["error"]["param"] == param, body
    queued = client.post("/v1/jobs", json={**JOBS["classifier"], **COMMON}).json()["id"]
    client.post(f"/v1/jobs/{queued}/cancel")
    assert wait_final(client, queued)["status"] == "cancelled"
    refused = client.post(f"/v1/jobs/{queued}/predict", json={"inputs": ["x"]})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "job_not_succeeded"


def test_a_looping_template_fails_its_own_request_only(served: Any) -> None:
    client, ids, _ = served
    boom = client.post(f"/v1/jobs/{ids['trap']}/predict",
                       json={"messages": [{"role": "user", "content": "boom"}]})  # fmt: skip
    assert boom.status_code == 500, boom.text
    assert "did not render within 3 s (GRADACC_PREDICT_RENDER_TIMEOUT_S)" in boom.text
    after = client.post(f"/v1/jobs/{ids['trap']}/predict",
                        json={"messages": MESSAGES, "max_new_tokens": 4})  # fmt: skip
    assert after.status_code == 200, after.text


def _predict_servers(home: Path) -> list[psutil.Process]:
    """This stack's predict servers (other tests' stacks run beside it)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            ours = process.environ().get("GRADACC_HOME") == str(home)
            if ours and process.info["cmdline"][-2:] == ["-m", "worker.predict"]:
                found.append(process)
        except (psutil.Error, TypeError):  # gone meanwhile, or not ours to read
            continue
    return found


def test_a_killed_predict_server_is_started_again(served: Any) -> None:
    client, ids, folder = served
    (server,) = wait_until(lambda: _predict_servers(folder / "home"), what="the predict server",
                           timeout=30)  # fmt: skip
    server.send_signal(signal.SIGKILL)
    server.wait(30)
    reply = client.post(f"/v1/jobs/{ids['classifier']}/predict", json={"inputs": TEXTS})
    assert reply.status_code == 200, reply.text
    (again,) = _predict_servers(folder / "home")
    assert again.pid != server.pid
