"""Two LoRA jobs on one base, served by one predict server through the official ``openai`` SDK:
asked concurrently, each answers greedily with exactly the tokens of its own merged model (the
``?merged=true`` download, loaded by ``from_pretrained``), and the base was loaded once (the
predict server's ``/stats``). The merged download is a plain model (no peft keys; safetensors,
the tokenizer and its chat template); the adapter alone is downloadable as before. Both stacks."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import select

from gradacc.db import session_scope
from gradacc.serving.resolve import TENANT_HEADER
from gradacc.settings import Settings
from gradacc.tables import Worker
from tests.e2e.conftest import serve_with_keys
from tests.support import serves, wait_final, wait_until

pytestmark = pytest.mark.integration
TOKEN = "a-predict-server-token-for-this-test"
# Both on builtin:tiny-chat of the default seed (42): one base; their rates make them differ.
JOB = {"model": "builtin:tiny-chat", "dataset": "builtin:chat-arithmetic", "task": "causal-lm",
       "num_train_epochs": 2, "max_train_samples": 32, "max_eval_samples": 4,
       "per_device_train_batch_size": 8, "lora": {"r": 4, "alpha": 8}}  # fmt: skip
RATES = (1e-2, 3e-2)
MESSAGES: Any = [{"role": "user", "content": "what is 2 plus 3?"}]
TOKENS = 12


@dataclass
class Served:
    sdk: openai.OpenAI
    models: list[str]  # the two jobs' fine_tuned_model
    merged: list[Path]  # their merged downloads
    answers: list[str | None]  # the four concurrent answers (a b a b)
    stats: dict[str, int]  # the predict server's /stats, read after them
    client: httpx.Client  # alice's, on the API
    job_ids: list[str]


@pytest.fixture(scope="module", params=["embedded", "pg_redis"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("shared")
    env = {"GRADACC_PREDICT_SERVER": "true", "GRADACC_SERVE_TOKEN": TOKEN}
    with serve_with_keys(request, home, env) as (settings, url, keys):
        headers = {"Authorization": f"Bearer {keys['alice']}"}
        with httpx.Client(base_url=url, timeout=120, headers=headers) as client:
            ids = []
            for rate in RATES:
                created = client.post("/v1/jobs", json={**JOB, "learning_rate": rate})
                assert created.status_code == 201, created.text
                ids.append(created.json()["id"])
            jobs = [wait_final(client, job_id, timeout=240) for job_id in ids]
            assert [job["status"] for job in jobs] == ["succeeded"] * 2, jobs
            merged = [_download(client, job_id, home / job_id) for job_id in ids]
            sdk = openai.OpenAI(base_url=f"{url}/v1", api_key=keys["alice"], max_retries=0,
                                timeout=60)  # fmt: skip
            models = [str(job["fine_tuned_model"]) for job in jobs]
            wait_until(lambda: serves(sdk, models[0]), what="the predict server", timeout=60)
            answers = _concurrently(sdk, models)
            stats = httpx.get(f"{_predict_server(settings)}/stats", timeout=10,
                              headers={"Authorization": f"Bearer {TOKEN}", TENANT_HEADER: "x"}).json()  # fmt: skip
            yield Served(sdk, models, merged, answers, stats, client, ids)


def _predict_server(settings: Settings) -> str:
    """This stack's predict server (the PostgreSQL database is shared: its queue says which)."""
    with session_scope(settings) as session:
        rows = session.scalars(select(Worker).where(Worker.queue == settings.queue)).all()
        (url,) = [row.serve_url for row in rows if row.serve_url]
    return url


def _download(client: httpx.Client, job_id: str, into: Path) -> Path:
    answer = client.get(f"/v1/jobs/{job_id}/artifacts/model", params={"merged": "true"})
    assert answer.status_code == 200, answer.text
    with tarfile.open(fileobj=io.BytesIO(answer.content), mode="r:gz") as tar:
        tar.extractall(into, filter="data")
    (extracted,) = into.iterdir()
    return extracted


def _concurrently(sdk: openai.OpenAI, models: list[str]) -> list[str | None]:
    """Each model asked twice, all four at once, interleaved (a b a b)."""

    def ask(model: str) -> str | None:
        answer = sdk.chat.completions.create(model=model, messages=MESSAGES, temperature=0,
                                             max_completion_tokens=TOKENS)  # fmt: skip
        return answer.choices[0].message.content

    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(ask, [*models, *models]))


def _greedy_text(folder: Path) -> str:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = (
        AutoModelForCausalLM.from_pretrained(folder),
        AutoTokenizer.from_pretrained(folder),
    )
    text = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                         max_new_tokens=TOKENS, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    return str(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))


def test_two_lora_jobs_answer_concurrently_as_their_merged_models_on_one_base(
    served: Served,
) -> None:
    expected = [_greedy_text(folder) for folder in served.merged]
    assert expected[0] != expected[1]  # negative control: a wrong adapter would show
    assert served.answers == [*expected, *expected]
    assert served.stats["base_loads"] == 1  # one base for both
    assert served.stats["adapter_loads"] == 2


def test_the_merged_download_is_a_plain_model_and_the_adapter_stays(served: Served) -> None:
    folder = served.merged[0]
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names, names
    assert not names & {"adapter_config.json", "adapter_model.safetensors", "gradacc_base.json"}
    config = json.loads((folder / "config.json").read_text())
    assert not [key for key in config if "peft" in key or "adapter" in key], config
    assert config["model_type"] == "gpt2"
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(folder).chat_template
    job_id = served.job_ids[0]
    adapter = served.client.get(f"/v1/jobs/{job_id}/artifacts/adapter")
    assert adapter.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(adapter.content), mode="r:gz") as tar:
        assert f"{job_id}-adapter/adapter_model.safetensors" in tar.getnames()
    plain = served.client.get(f"/v1/jobs/{job_id}/artifacts/model")
    assert plain.status_code == 404  # unmerged LoRA: no whole model/ unless asked to merge
