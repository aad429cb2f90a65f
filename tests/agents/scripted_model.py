#!/usr/bin/env python3
"""A scripted model server: drives a real agent CLI through a fixed sequence of tool calls, offline.

Speaks enough of the Anthropic Messages API (POST /v1/messages, streamed as server-sent events
or not) and of the OpenAI Responses API (POST /v1/responses, streamed) for Claude Code and
Codex. The script is a JSON file:

    {"steps": [{"tool": "list_dir", "input": {"path": "."}}, ..., {"text": "done"}]}

Step N answers the agent's request whose conversation already holds N of the model's turns, so
the server keeps no state between requests and an agent's side requests (titles, summaries: any
request that offers no tool named in the script) get a short text and do not advance it. A tool
is named by its MCP tool name; the request's own spelling of it (mcp__airlock__list_dir,
airlock__list_dir, ...) is used in the answer. Every request is appended to the log file as one
JSON line. Listens on 127.0.0.1 (port 0: any) and prints {"port": N} on stdout once it accepts.

usage: scripted_model.py SCRIPT LOG [PORT]
"""
import http.server
import json
import socketserver
import sys
import uuid

SCRIPT = json.load(open(sys.argv[1]))["steps"]
LOG = sys.argv[2]
PORT = int(sys.argv[3]) if len(sys.argv) > 3 else 0


def log(entry):
    with open(LOG, "a") as f:
        f.write(json.dumps(entry) + "\n")


def offered_names(tools, namespace=None):
    """Every tool's name; a tool inside a namespace (Codex groups an MCP server's tools so) as
    NAMESPACE__NAME."""
    names = []
    for t in tools or []:
        if not isinstance(t, dict):
            continue
        if t.get("type") == "namespace":
            names += offered_names(t.get("tools"), t.get("name"))
            continue
        name = t.get("name") or (t.get("function") or {}).get("name") or ""
        names.append(f"{namespace}__{name}" if namespace else name)
    return names


def namespaced(name, tools):
    """(namespace, name) when `name` is a namespaced tool's spelling, else (None, name)."""
    for t in tools or []:
        if isinstance(t, dict) and t.get("type") == "namespace" and name.startswith(t.get("name", "") + "__"):
            return t["name"], name[len(t["name"]) + 2:]
    return None, name


def spelled(name, offered):
    """The offered tool whose name is `name` or ends with a separator and `name`."""
    for o in offered:
        if o == name or o.endswith("__" + name) or o.endswith("_" + name) or o.endswith("." + name):
            return o
    return None


def step_for(turns, offered):
    """The script's step for a conversation with `turns` model turns, or None (a side request)."""
    tool_names = [s["tool"] for s in SCRIPT if "tool" in s]
    if tool_names and not any(spelled(n, offered) for n in tool_names):
        return None
    return SCRIPT[min(turns, len(SCRIPT) - 1)]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply_json(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_events(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def event(self, name, data):
        self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    def do_GET(self):
        log({"method": "GET", "path": self.path})
        self.reply_json(404, {"error": {"type": "not_found", "message": "the scripted model serves POST only"}})

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        path = self.path.split("?")[0]
        log({"method": "POST", "path": self.path, "body": body})
        if path.endswith("/messages/count_tokens"):
            return self.reply_json(200, {"input_tokens": 100})
        if path.endswith("/messages"):
            return self.anthropic(body)
        if path.endswith("/responses"):
            return self.openai_responses(body)
        self.reply_json(404, {"error": {"type": "not_found", "message": f"no route {path}"}})

    # ------------------------------------------------------------------ Anthropic Messages
    def anthropic(self, body):
        offered = offered_names(body.get("tools"))
        turns = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        step = step_for(turns, offered)
        model = body.get("model", "scripted")
        msg_id = "msg_" + uuid.uuid4().hex[:24]
        if step is None or "text" in step:
            text = step["text"] if step else "ok"
            blocks = [{"type": "text", "text": text}]
            stop = "end_turn"
        else:
            name = spelled(step["tool"], offered) or step["tool"]
            blocks = [{"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24], "name": name,
                       "input": step.get("input", {})}]
            stop = "tool_use"
        usage = {"input_tokens": 10, "output_tokens": 10, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 0}
        if not body.get("stream"):
            return self.reply_json(200, {"id": msg_id, "type": "message", "role": "assistant", "model": model,
                                         "content": blocks, "stop_reason": stop, "stop_sequence": None,
                                         "usage": usage})
        self.start_events()
        self.event("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": usage}})
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                self.event("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text", "text": ""}})
                self.event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                   "delta": {"type": "text_delta", "text": b["text"]}})
            else:
                self.event("content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                    "type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}})
                self.event("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                    "type": "input_json_delta", "partial_json": json.dumps(b["input"])}})
            self.event("content_block_stop", {"type": "content_block_stop", "index": i})
        self.event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": 10}})
        self.event("message_stop", {"type": "message_stop"})

    # ------------------------------------------------------------------ OpenAI Responses
    def openai_responses(self, body):
        offered = offered_names(body.get("tools"))
        turns = sum(1 for item in body.get("input", []) if isinstance(item, dict) and
                    (item.get("type") == "function_call" or
                     (item.get("type") == "message" and item.get("role") == "assistant")))
        step = step_for(turns, offered)
        resp_id = "resp_" + uuid.uuid4().hex[:24]
        model = body.get("model", "scripted")
        if step is None or "text" in step:
            text = step["text"] if step else "ok"
            item = {"type": "message", "id": "msg_" + uuid.uuid4().hex[:24], "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}
        else:
            namespace, name = namespaced(spelled(step["tool"], offered) or step["tool"], body.get("tools"))
            item = {"type": "function_call", "id": "fc_" + uuid.uuid4().hex[:24], "status": "completed",
                    "call_id": "call_" + uuid.uuid4().hex[:24], "name": name,
                    "arguments": json.dumps(step.get("input", {}))}
            if namespace:
                item["namespace"] = namespace
        usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 10,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 20}
        response = {"id": resp_id, "object": "response", "model": model, "status": "in_progress", "output": []}
        self.start_events()
        self.event("response.created", {"type": "response.created", "response": response})
        self.event("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                                  "item": item})
        self.event("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                                                 "item": item})
        done = dict(response, status="completed", output=[item], usage=usage)
        self.event("response.completed", {"type": "response.completed", "response": done})


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


if __name__ == "__main__":
    srv = Server(("127.0.0.1", PORT), Handler)
    print(json.dumps({"port": srv.server_address[1]}), flush=True)
    srv.serve_forever()
