"""The SDK's protobuf messages to the core's types and back (docs/tinker-protocol.md, 2.5, 3.2,
2.9): ``ForwardBackwardRequest`` to ``Datum``s, the core's ``Output`` to
``ForwardBackwardOutput`` (one ``logprobs`` vector per datum, metrics ``name:reduction``), and
``Samples`` to ``SampleResponse``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from gradacc.tinker.wire import pb
from trainer_core.tinker_host.host import Datum, Output
from trainer_core.tinker_host.sampling import Samples

DTYPES = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}
UNSERVED = ("gspo", "stable_reinforce", "custom")


def decode_forward(raw: bytes) -> tuple[list[Datum], str, dict[str, float | str]]:
    message = pb.ForwardBackwardRequest()
    message.ParseFromString(raw)
    config: dict[str, float | str] = {}
    if message.loss_fn_config_v2:
        for key, value in message.loss_fn_config_v2.items():
            config[key] = value.text if value.WhichOneof("value") == "text" else value.number
    else:
        config.update(message.loss_fn_config)
    if message.loss_fn in UNSERVED:
        raise ValueError(f"loss_fn: {message.loss_fn} is not served here (docs/tinker.md)")
    data = [_datum(index, d) for index, d in enumerate(message.data)]
    return data, message.loss_fn, config


def _datum(index: int, datum: Any) -> Datum:
    tokens: list[int] = []
    for chunk in datum.model_input:
        if chunk.WhichOneof("chunk") != "encoded_text":
            raise ValueError(f"data[{index}].model_input: only text chunks are served here")
        tokens.extend(np.frombuffer(chunk.encoded_text.tokens, dtype="<i4").tolist())
    inputs = {key: _tensor(index, key, value) for key, value in datum.loss_fn_inputs.items()}
    return Datum(tokens, inputs)


def _tensor(index: int, key: str, message: Any) -> torch.Tensor:
    dtype = DTYPES.get(message.dtype)
    if dtype is None:
        raise ValueError(f"data[{index}].loss_fn_inputs.{key}: dtype {message.dtype} not served")
    if message.WhichOneof("encoding") == "sparse_csr":
        raise ValueError(f"data[{index}].loss_fn_inputs.{key}: send it dense (1-D)")
    array = np.frombuffer(message.dense, dtype=np.dtype(dtype).newbyteorder("<")).copy()
    if array.dtype.kind == "i":
        return torch.from_numpy(array.astype(np.int64))
    return torch.from_numpy(array.astype(np.float32))


def encode_forward(output: Output) -> bytes:
    record = pb.ArrayRecord(type_tag="ArrayRecord", num_datums=len(output.logprobs))
    arrays = [p.numpy().astype("<f4") for p in output.logprobs]
    offsets = np.cumsum([0, *[a.nbytes for a in arrays]]).astype("<i8")
    field = record.fields["logprobs"]
    field.data = b"".join(a.tobytes() for a in arrays)
    field.offsets = offsets.tobytes()
    field.dtype = pb.DTYPE_FLOAT32
    message = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord")
    message.loss_fn_outputs.append(record)
    for key, value in output.metrics.items():
        message.metrics[key] = float(value)
    return bytes(message.SerializeToString())


def encode_samples(samples: Samples) -> bytes:
    message = pb.SampleResponse()
    for found in samples.sequences:
        reason = pb.STOP_REASON_STOP if found.stop_reason == "stop" else pb.STOP_REASON_LENGTH
        message.sequences.append(
            pb.SampledSequence(
                stop_reason=reason,
                tokens=np.asarray(found.tokens, dtype="<i4").tobytes(),
                logprobs=np.asarray(found.logprobs, dtype="<f4").tobytes(),
            )
        )
    if samples.prompt_logprobs is not None:
        message.prompt_logprobs = np.asarray(samples.prompt_logprobs, dtype="<f4").tobytes()
    return bytes(message.SerializeToString())


def prompt_tokens(body: dict[str, Any]) -> list[int]:
    tokens: list[int] = []
    for chunk in (body.get("prompt") or {}).get("chunks") or []:
        if chunk.get("type") != "encoded_text":
            raise ValueError("prompt: only encoded_text chunks are served here")
        tokens.extend(int(t) for t in chunk.get("tokens") or [])
    return tokens
