"""A source is checked at POST for what it would make the server read (issue 30, H1 and L1): a
hub id must be in the server's Hugging Face cache or known to the hub (offline here: the cache
only), a cached adapter's base must be a hub id, a dataset folder's card must not reach outside
it, and no refusal tells what exists on the API's disk or shows a path of this server.

The Hugging Face cache is a fake one built under tmp_path (``models--OWNER--NAME`` with
``refs/main`` and a snapshot), as a connected machine's download would leave it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient
from huggingface_hub import constants

from api.main import create_app
from gradacc.settings import Settings
from tests.api.test_fine_tuning_api import chat_file, sdk
from tests.conftest import TINY

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def fake_repo(cache: Path, kind: str, repo_id: str, files: dict[str, str]) -> Path:
    repo = cache / f"{kind}s--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for name, text in files.items():
        (snapshot / name).write_text(text)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    assert constants.is_offline_mode()  # tests/conftest.py: no test reaches the hub
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture
def client(db_settings: Settings, hub_cache: Path) -> Iterator[TestClient]:
    settings = db_settings.model_copy(update={"require_auth": True})
    (settings.home / "data").mkdir(parents=True, exist_ok=True)
    with TestClient(create_app(settings), raise_server_exceptions=False) as app_client:
        app_client.app.state.test_settings = settings  # type: ignore[attr-defined]
        yield app_client


def post(client: TestClient, **changes: Any) -> Any:
    key = sdk(client, "alice").api_key
    spec = {**TINY, **changes}
    return client.post("/v1/jobs", json=spec, headers={"authorization": f"Bearer {key}"})


def refusal(response: Any, param: str, settings: Settings) -> str:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["param"] == param, error
    assert str(settings.home) not in response.text and str(Path.cwd()) not in response.text
    assert str(settings.home.resolve()) not in response.text
    return str(error["message"])


def test_no_existence_oracle_and_unknown_hub_ids_are_refused(client: TestClient) -> None:
    settings: Settings = client.app.state.test_settings  # type: ignore[attr-defined]
    assert Path("api").is_dir()  # a name that exists relative to the API's working directory
    answers = {}
    for name in ("api", "zzq-not-here-9", "nope/not-a-model-xyz", "gpt-4o-mini-2024-07-18"):
        message = refusal(post(client, model=name), "model", settings)
        answers[name] = message.replace(repr(name), "NAME")
        assert "HF_HUB_OFFLINE" in message and "POST /v1/files" in message
    assert len(set(answers.values())) == 1, answers  # the same answer, whatever is on the disk
    dataset = refusal(post(client, dataset="acme/no-such-set:cfg"), "dataset", settings)
    assert "dataset 'acme/no-such-set'" in dataset


def test_a_cached_hub_id_is_accepted(client: TestClient, hub_cache: Path) -> None:
    fake_repo(hub_cache, "model", "acme/tiny", {"config.json": "{}"})
    fake_repo(hub_cache, "dataset", "acme/reviews", {"train.jsonl": '{"text": "a", "label": 1}'})
    accepted = post(client, model="acme/tiny", dataset="acme/reviews", eval_dataset="acme/reviews")
    assert accepted.status_code == 201, accepted.text


def test_the_hub_allow_list_limits_even_cached_ids(db_settings: Settings, hub_cache: Path) -> None:
    fake_repo(hub_cache, "model", "acme/tiny", {"config.json": "{}"})
    fake_repo(hub_cache, "model", "other/tiny", {"config.json": "{}"})
    settings = db_settings.model_copy(update={"require_auth": True, "hub_allow": "acme/*, gpt2"})
    with TestClient(create_app(settings), raise_server_exceptions=False) as app_client:
        app_client.app.state.test_settings = settings  # type: ignore[attr-defined]
        assert post(app_client, model="acme/tiny").status_code == 201
        message = refusal(post(app_client, model="other/tiny"), "model", settings)
        assert "GRADACC_HUB_ALLOW" in message


def test_a_cached_adapter_whose_base_is_a_path_is_refused(
    client: TestClient, hub_cache: Path
) -> None:
    settings: Settings = client.app.state.test_settings  # type: ignore[attr-defined]
    victim = settings.jobs_dir / "job_0123456789abcdef0123" / "model"
    victim.mkdir(parents=True)
    (victim / "config.json").write_text("{}")
    adapter = {"base_model_name_or_path": str(victim), "peft_type": "LORA"}
    fake_repo(hub_cache, "model", "attacker/evil", {"adapter_config.json": json.dumps(adapter)})
    message = refusal(post(client, model="attacker/evil"), "model", settings)
    assert "adapter" in message and "base_model_name_or_path" in message
    # The same adapter in a folder under a data root.
    folder = settings.home / "data" / "evil-adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps(adapter))
    message = refusal(post(client, model=str(folder)), "model", settings)
    assert "adapter" in message
    # An adapter on a cached hub base is fine.
    fake_repo(hub_cache, "model", "acme/base", {"config.json": "{}"})
    good = {"base_model_name_or_path": "acme/base", "peft_type": "LORA"}
    fake_repo(hub_cache, "model", "acme/lora", {"adapter_config.json": json.dumps(good)})
    assert post(client, model="acme/lora").status_code == 201


CARD = "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: {}\n---\n"


@pytest.mark.parametrize("param", ["dataset", "eval_dataset"])
def test_a_dataset_folder_whose_card_reaches_outside_is_refused(
    client: TestClient, param: str
) -> None:
    settings: Settings = client.app.state.test_settings  # type: ignore[attr-defined]
    victim = settings.files_dir / "file-0123456789abcdef0123" / "data.jsonl"
    victim.parent.mkdir(parents=True)
    victim.write_text('{"text": "the victim\'s row", "label": 1}\n')
    folder = settings.home / "data" / "evil"
    folder.mkdir()
    for entry in (f"{settings.files_dir.resolve()}/*/data.jsonl", "../../files/*/data.jsonl",
                  "hf://datasets/other/private/data.jsonl"):  # fmt: skip
        (folder / "README.md").write_text(CARD.format(entry))
        message = refusal(post(client, **{param: str(folder)}), param, settings)
        assert "configs[0].data_files" in message, message
    (folder / "README.md").write_text(CARD.format("rows/*.jsonl"))  # relative: inside
    (folder / "rows").mkdir()
    (folder / "rows" / "a.jsonl").write_text('{"text": "mine", "label": 0}\n')
    assert post(client, **{param: str(folder)}).status_code == 201


def test_a_path_outside_the_roots_shows_neither_roots_nor_path(client: TestClient) -> None:
    settings: Settings = client.app.state.test_settings  # type: ignore[attr-defined]
    for value in ("/etc/hosts.csv", f"{settings.home}/data/../files/x.csv", "./api/main.jsonl"):
        message = refusal(post(client, dataset=value), "dataset", settings)
        assert "GRADACC_DATA_ROOTS" in message and "/v1/files" in message
        assert str((settings.home / "data").resolve()) not in message


def test_the_openai_route_refuses_an_unreachable_hub_model_with_param(
    client: TestClient, hub_cache: Path
) -> None:
    alice = sdk(client, "alice")
    file = chat_file(alice)
    for model in ("nope/not-a-model-xyz", "gpt-4o-mini-2024-07-18"):
        with pytest.raises(openai.BadRequestError) as raised:
            alice.fine_tuning.jobs.create(model=model, training_file=file.id)
        assert raised.value.param == "model", raised.value.body
    fake_repo(hub_cache, "model", "acme/tiny-chat", {"config.json": "{}"})
    job = alice.fine_tuning.jobs.create(model="acme/tiny-chat", training_file=file.id)
    assert job.model == "acme/tiny-chat"
