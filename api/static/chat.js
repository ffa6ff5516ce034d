// The job page's chat pane: talk to a finished causal LM (its final model or a kept checkpoint)
// through POST /v1/chat/completions with stream: true, the answer drawn as its chunks arrive.
// The conversation is kept and sent back whole each turn, as OpenAI's API wants. Loaded before
// app.js, whose $() and headers() it calls; app.js calls openChat, updateChat and closeChat.
"use strict";

// What a job's chat needs between turns: its messages and the fetch a Stop aborts.
const chat = { jobId: null, messages: [], abort: null, models: { final: null, checkpoints: [] } };

// A new job page: a fresh conversation; the pane only for a causal LM.
function openChat(job) {
  closeChat();
  chat.jobId = job.id;
  chat.messages = [];
  chat.models = { final: null, checkpoints: [] };
  $("chat-log").replaceChildren();
  $("chat-error").textContent = "";
  updateChat(job);
}

function closeChat() {
  chat.abort?.abort();
  chat.jobId = null;
}

// A job's update (its status, its fine_tuned_model once it succeeded): can it answer yet? A
// checkpoint of a job that has not succeeded cannot: a checkpoint's model borrows the tokenizer
// the job saves when it succeeds (gradacc.sources.fine_tuned.model_folder).
function updateChat(job) {
  if (job.id !== chat.jobId) return;
  const causal = job.spec.task === "causal-lm";
  chat.models.final = causal ? job.fine_tuned_model : null;
  $("chat-section").hidden = false;
  $("chat-note").textContent = !causal ? "A classifier has no chat: try it in the box above."
    : chat.models.final ? "" : job.status === "succeeded" ? "Its model was deleted: no chat."
      : "The chat opens when the job succeeds: its model and checkpoints answer then.";
  $("chat-note").hidden = !$("chat-note").textContent;
  drawModels();
}

// The kept checkpoints (job_controls.js lists them): each answers as its own model.
function chatCheckpoints(jobId, listed) {
  if (jobId !== chat.jobId) return;
  chat.models.checkpoints = listed.map((c) => ({ name: c.model, step: c.step_number }));
  drawModels();
}

function drawModels() {
  const picker = $("chat-model");
  const kept = picker.value;
  const options = [];
  if (chat.models.final) {
    options.push([chat.models.final, "final model"]);
    for (const c of chat.models.checkpoints) options.push([c.name, `checkpoint at step ${c.step}`]);
  }
  picker.replaceChildren(...options.map(([value, label]) => new Option(label, value)));
  if (options.some(([value]) => value === kept)) picker.value = kept;
  $("chat-pane").hidden = options.length === 0;
}

function bubble(role, text) {
  const li = document.createElement("li");
  li.className = `chat-${role}`;
  li.dataset.role = role;
  li.textContent = text;
  $("chat-log").appendChild(li);
  return li;
}

function chatBusy(busy) {
  $("chat-send").disabled = busy;
  $("chat-stop").disabled = !busy;
}

async function sendChat(event) {
  event.preventDefault();
  const box = event.target.message;
  const text = box.value.trim();
  if (!text || chat.abort) return;
  box.value = "";
  $("chat-error").textContent = "";
  const turn = { role: "user", content: text };
  const asked = bubble("user", text);
  const answer = bubble("assistant", "");
  answer.dataset.chunks = "0";
  const abort = new AbortController();
  chat.abort = abort;
  chatBusy(true);
  try {
    const reply = await streamChat([...chat.messages, turn], abort.signal, answer);
    chat.messages.push(turn, { role: "assistant", content: reply });
    answer.dataset.state = "done";
  } catch (error) {
    if (!answer.isConnected) return; // cleared or another job opened: this turn is gone
    if (abort.signal.aborted && answer.textContent) { // Stop: what came is a turn to build on
      chat.messages.push(turn, { role: "assistant", content: answer.textContent });
      answer.dataset.state = "stopped";
      return;
    }
    asked.remove(); // nothing of this turn is kept: the message goes back to the box
    answer.remove();
    box.value = text;
    if (!abort.signal.aborted) $("chat-error").textContent = error.message;
  } finally {
    if (chat.abort === abort) {
      chat.abort = null;
      chatBusy(false);
    }
  }
}

// One streamed completion: the answer's text, drawn into ``answer`` chunk by chunk.
async function streamChat(messages, signal, answer) {
  const body = { model: $("chat-model").value, messages, stream: true,
    max_completion_tokens: parseInt($("chat-max-tokens").value, 10),
    temperature: parseFloat($("chat-temperature").value) };
  const response = await fetch("/v1/chat/completions", { method: "POST", signal,
    headers: headers({ "content-type": "application/json" }), body: JSON.stringify(body) });
  if (!response.ok) throw new Error(await errorMessage(response));
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error("the stream ended before [DONE]");
    buffer += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const data = buffer.slice(0, end).split("\n").filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, "")).join("\n");
      buffer = buffer.slice(end + 2);
      if (data === "[DONE]") return answer.textContent;
      if (data) addChunk(JSON.parse(data), answer);
    }
  }
}

function addChunk(chunk, answer) {
  if (chunk.error) throw new Error(chunk.error.message); // a stream that failed mid-way
  const piece = chunk.choices?.[0]?.delta?.content;
  if (!piece) return;
  answer.textContent += piece;
  answer.dataset.chunks = String(Number(answer.dataset.chunks) + 1);
}

// OpenAI's error body ({"error": {"message", "param"}}), or the status when there is none.
async function errorMessage(response) {
  try {
    const error = (await response.json()).error;
    return error.param ? `${error.param}: ${error.message}` : error.message;
  } catch {
    return `HTTP ${response.status}`;
  }
}

// Wired at load, before app.js defines $().
const chatForm = document.getElementById("chat-form");
chatForm.onsubmit = sendChat;
document.getElementById("chat-stop").onclick = () => chat.abort?.abort();
document.getElementById("chat-clear").onclick = () => {
  chat.abort?.abort();
  chat.messages = [];
  document.getElementById("chat-log").replaceChildren();
  document.getElementById("chat-error").textContent = "";
};
// Enter sends, Shift+Enter breaks the line, as in most chat boxes.
chatForm.message.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    chatForm.requestSubmit();
  }
});
