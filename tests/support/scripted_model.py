#!/usr/bin/env python3
"""Scripted stand-in for the model APIs used by real agent CLIs.

Speaks enough of the Anthropic Messages API (Claude Code) and of the OpenAI
Responses API (Codex CLI) to drive ONE fixed task, decided statelessly from
the number of tool results the request's conversation already holds:

  turn 1: run `echo done > result.txt`
  turn 2: run `cat /etc/shadow`
  turn 3: run `curl -sS -m 5 https://example.org/ || echo FETCH-REFUSED`
  turn 4: final text "TASK-DONE", end of turn

Requests that do not carry the CLI's shell tool (title generation, quota
probes, haiku side calls, ...) get a short plain-text answer without tools.
Every request is logged as one JSON line to --log.  See SCRIPTED_MODEL.md.

Python 3.11 standard library only.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import ssl
import sys
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

COMMANDS = [
    "echo done > result.txt",
    "cat /etc/shadow",
    "curl -sS -m 5 https://example.org/ || echo FETCH-REFUSED",
]
DESCRIPTIONS = [
    "Write done to result.txt",
    "Print the shadow password file",
    "Fetch example.org",
]
FINAL_TEXT = "TASK-DONE"
FINAL_TURN = len(COMMANDS) + 1
SIDE_TEXT = "Scripted reply"

# Tool names, in order of preference, that a CLI offers for running a shell
# command.  The value says how the call is shaped (see _openai_tool_call).
OPENAI_SHELL_FUNCTIONS = {
    "exec_command": "exec_command",   # codex unified exec: {"cmd": "..."}
    "shell_command": "shell_command",  # codex: {"command": "..."}
    "shell": "shell",                  # codex legacy: {"command": [argv]}
    "container.exec": "shell",         # codex legacy alias
}

MAX_BODY = 64 * 1024 * 1024


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z"


def _short_id() -> str:
    return uuid.uuid4().hex[:24]


def _sse(event: str, data: dict) -> bytes:
    return ("event: %s\ndata: %s\n\n" % (event, json.dumps(data, separators=(",", ":")))).encode()


def _text_of(content) -> str:
    """Flatten tool-result / output content (string or list of parts) to text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    parts.append(part["text"])
                elif "content" in part:
                    parts.append(_text_of(part["content"]))
                elif "output" in part:
                    parts.append(_text_of(part["output"]))
        return "\n".join(parts)
    if isinstance(content, dict):
        for key in ("text", "output", "content"):
            if key in content:
                return _text_of(content[key])
        return json.dumps(content)
    return str(content)


def _turn_for(n_results: int) -> int:
    return min(n_results + 1, FINAL_TURN)


def _example_for_schema(schema) -> object:
    """A minimal value that satisfies a (simple) JSON schema."""
    if not isinstance(schema, dict):
        return SIDE_TEXT
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return _example_for_schema(schema[key][0])
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), t[0] if t else "string")
    if t == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {k: _example_for_schema(v) for k, v in props.items()}
    if t == "array":
        return []
    if t == "boolean":
        return False
    if t in ("integer", "number"):
        return 0
    if t == "null":
        return None
    return SIDE_TEXT


# --------------------------------------------------------------------------
# Anthropic Messages API
# --------------------------------------------------------------------------

def anthropic_plan(body: dict) -> dict:
    """Decide what to answer for a /v1/messages request."""
    tools = body.get("tools") or []
    tool_names = [t.get("name") for t in tools if isinstance(t, dict)]
    results = []
    for msg in body.get("messages") or []:
        if not isinstance(msg, dict) or msg.get("role") != "user":
            continue
        content = msg.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                results.append({
                    "tool_use_id": block.get("tool_use_id"),
                    "is_error": bool(block.get("is_error")),
                    "text": _text_of(block.get("content")),
                })
    system_text = _text_of(body.get("system"))
    fmt = ((body.get("output_config") or {}).get("format") or {})
    reasons = []
    if "Bash" not in tool_names:
        reasons.append("no Bash tool")
    if fmt.get("type") == "json_schema":
        reasons.append("structured output")
    if body.get("max_tokens") == 1:
        reasons.append("max_tokens=1")
    if "Generate a concise" in system_text and "title" in system_text:
        reasons.append("title prompt")
    plan = {"results": results, "tool_names": tool_names}
    if reasons:
        plan.update(kind="side", side_reason=", ".join(reasons), turn=None)
        if fmt.get("type") == "json_schema":
            plan["text"] = json.dumps(_example_for_schema(fmt.get("schema")))
        else:
            plan["text"] = SIDE_TEXT
        return plan
    turn = _turn_for(len(results))
    plan.update(kind="main", turn=turn)
    if turn == FINAL_TURN:
        plan["text"] = FINAL_TEXT
    else:
        plan["tool"] = {
            "name": "Bash",
            "input": {"command": COMMANDS[turn - 1], "description": DESCRIPTIONS[turn - 1]},
        }
        plan["command"] = COMMANDS[turn - 1]
    return plan


def anthropic_response(body: dict, plan: dict, stream: bool):
    model = body.get("model") or "scripted-model"
    msg_id = "msg_scripted_" + _short_id()
    if "tool" in plan:
        block = {"type": "tool_use", "id": "toolu_scripted_%d_%s" % (plan["turn"], _short_id()),
                 "name": plan["tool"]["name"], "input": plan["tool"]["input"]}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": plan["text"]}
        stop = "end_turn"
    usage = {"input_tokens": 10, "output_tokens": 10,
             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    if not stream:
        return "application/json", json.dumps({
            "id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": [block], "stop_reason": stop, "stop_sequence": None, "usage": usage,
        }).encode()
    out = [_sse("message_start", {"type": "message_start", "message": {
        "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": dict(usage, output_tokens=1)}})]
    if block["type"] == "text":
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": 0,
                                                "content_block": {"type": "text", "text": ""}}))
        out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                "delta": {"type": "text_delta", "text": block["text"]}}))
    else:
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": 0,
                                                "content_block": dict(block, input={})}))
        out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                "delta": {"type": "input_json_delta",
                                                          "partial_json": json.dumps(block["input"])}}))
    out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
    out.append(_sse("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": stop, "stop_sequence": None},
                                      "usage": {"output_tokens": 10}}))
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return "text/event-stream", b"".join(out)


# --------------------------------------------------------------------------
# OpenAI Responses API
# --------------------------------------------------------------------------

def _walk_openai_tools(tools, namespace=None):
    for t in tools or []:
        if not isinstance(t, dict):
            continue
        if t.get("type") == "namespace":
            yield from _walk_openai_tools(t.get("tools"), t.get("name"))
        else:
            yield namespace, t


def openai_tools(body: dict):
    """All tools offered: top-level `tools` plus `additional_tools` input items."""
    found = list(_walk_openai_tools(body.get("tools")))
    inp = body.get("input")
    if isinstance(inp, list):
        for item in inp:
            if isinstance(item, dict) and item.get("type") == "additional_tools":
                found.extend(_walk_openai_tools(item.get("tools")))
    return found


def openai_pick_shell(tools):
    """Return (style, namespace, tool) for the best shell-capable tool."""
    by_name = {}
    for ns, t in tools:
        ttype = t.get("type")
        if ttype == "local_shell":
            by_name.setdefault("local_shell", ("local_shell", ns, t))
        elif ttype == "function" and t.get("name") in OPENAI_SHELL_FUNCTIONS:
            by_name.setdefault(t["name"], (OPENAI_SHELL_FUNCTIONS[t["name"]], ns, t))
        elif ttype == "custom" and t.get("name") == "exec" and "tools.exec_command" in (t.get("description") or ""):
            by_name.setdefault("code_mode_exec", ("code_mode_exec", ns, t))
    for name in ("exec_command", "shell_command", "shell", "container.exec", "local_shell", "code_mode_exec"):
        if name in by_name:
            return by_name[name]
    return None


OPENAI_RESULT_TYPES = ("function_call_output", "custom_tool_call_output", "local_shell_call_output",
                       "mcp_tool_call_output", "tool_search_output")


def openai_plan(body: dict, workdir_hint: str | None) -> dict:
    inp = body.get("input")
    results = []
    if isinstance(inp, list):
        for item in inp:
            if isinstance(item, dict) and item.get("type") in OPENAI_RESULT_TYPES:
                results.append({"call_id": item.get("call_id"), "type": item.get("type"),
                                "text": _text_of(item.get("output"))})
    tools = openai_tools(body)
    tool_names = [("%s.%s" % (ns, t.get("name")) if ns else (t.get("name") or t.get("type")))
                  for ns, t in tools]
    pick = openai_pick_shell(tools)
    plan = {"results": results, "tool_names": tool_names}
    if pick is None:
        fmt = ((body.get("text") or {}).get("format") or {})
        plan.update(kind="side", side_reason="no shell tool", turn=None)
        plan["text"] = (json.dumps(_example_for_schema(fmt.get("schema")))
                        if fmt.get("type") == "json_schema" else SIDE_TEXT)
        return plan
    turn = _turn_for(len(results))
    plan.update(kind="main", turn=turn)
    if turn == FINAL_TURN:
        plan["text"] = FINAL_TEXT
        return plan
    cmd = COMMANDS[turn - 1]
    plan["command"] = cmd
    style, ns, tool = pick
    call_id = "call_scripted_%d_%s" % (turn, _short_id())
    props = ((tool.get("parameters") or {}).get("properties") or {})
    if style == "exec_command":
        args = {"cmd": cmd}
        if workdir_hint and "workdir" in props:
            args["workdir"] = workdir_hint
        item = {"type": "function_call", "name": tool["name"], "arguments": json.dumps(args)}
    elif style == "shell_command":
        args = {"command": cmd}
        if workdir_hint and "workdir" in props:
            args["workdir"] = workdir_hint
        item = {"type": "function_call", "name": tool["name"], "arguments": json.dumps(args)}
    elif style == "shell":
        args = {"command": ["bash", "-lc", cmd]}
        if workdir_hint and "workdir" in props:
            args["workdir"] = workdir_hint
        item = {"type": "function_call", "name": tool["name"], "arguments": json.dumps(args)}
    elif style == "local_shell":
        action = {"type": "exec", "command": ["bash", "-lc", cmd]}
        if workdir_hint:
            action["working_directory"] = workdir_hint
        item = {"type": "local_shell_call", "action": action}
    else:  # code mode: a freeform JavaScript `exec` tool with nested tools.exec_command
        args = {"cmd": cmd}
        if workdir_hint:
            args["workdir"] = workdir_hint
        js = ("const r = await tools.exec_command(%s);\n"
              "text(typeof r === 'string' ? r : (r.output ?? JSON.stringify(r)));\n"
              "if (r && r.exit_code !== undefined) text('exit_code: ' + r.exit_code);\n") % json.dumps(args)
        item = {"type": "custom_tool_call", "name": tool["name"], "input": js}
    if ns and ns != "functions":
        item["namespace"] = ns
    item["call_id"] = call_id
    item["status"] = "completed"
    plan["item"] = item
    plan["tool_style"] = style
    return plan


def openai_response(body: dict, plan: dict, stream: bool):
    model = body.get("model") or "scripted-model"
    resp_id = "resp_scripted_" + _short_id()
    if "item" in plan:
        item = dict(plan["item"])
        prefix = {"function_call": "fc", "custom_tool_call": "ctc", "local_shell_call": "lsc"}[item["type"]]
        item["id"] = "%s_scripted_%s" % (prefix, _short_id())
    else:
        item = {"type": "message", "id": "msg_scripted_" + _short_id(), "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": plan["text"], "annotations": []}]}
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 20}
    created = int(time.time())
    base = {"id": resp_id, "object": "response", "created_at": created, "model": model,
            "output": [], "status": "in_progress", "usage": None}
    done = dict(base, status="completed", output=[item], usage=usage)
    if not stream:
        return "application/json", json.dumps(done).encode()
    seq = iter(range(1000))
    out = [_sse("response.created", {"type": "response.created", "sequence_number": next(seq), "response": base}),
           _sse("response.in_progress", {"type": "response.in_progress", "sequence_number": next(seq),
                                         "response": base})]
    if item["type"] == "message":
        added = dict(item, status="in_progress", content=[])
        out.append(_sse("response.output_item.added", {"type": "response.output_item.added",
                                                       "sequence_number": next(seq),
                                                       "output_index": 0, "item": added}))
        part = {"type": "output_text", "text": "", "annotations": []}
        out.append(_sse("response.content_part.added", {"type": "response.content_part.added",
                                                        "sequence_number": next(seq), "item_id": item["id"],
                                                        "output_index": 0, "content_index": 0, "part": part}))
        out.append(_sse("response.output_text.delta", {"type": "response.output_text.delta",
                                                       "sequence_number": next(seq), "item_id": item["id"],
                                                       "output_index": 0, "content_index": 0,
                                                       "delta": plan["text"]}))
        out.append(_sse("response.output_text.done", {"type": "response.output_text.done",
                                                      "sequence_number": next(seq), "item_id": item["id"],
                                                      "output_index": 0, "content_index": 0,
                                                      "text": plan["text"]}))
        out.append(_sse("response.content_part.done", {"type": "response.content_part.done",
                                                       "sequence_number": next(seq), "item_id": item["id"],
                                                       "output_index": 0, "content_index": 0,
                                                       "part": item["content"][0]}))
    else:
        out.append(_sse("response.output_item.added", {"type": "response.output_item.added",
                                                       "sequence_number": next(seq),
                                                       "output_index": 0, "item": item}))
    out.append(_sse("response.output_item.done", {"type": "response.output_item.done",
                                                  "sequence_number": next(seq), "output_index": 0,
                                                  "item": item}))
    out.append(_sse("response.completed", {"type": "response.completed", "sequence_number": next(seq),
                                           "response": done}))
    return "text/event-stream", b"".join(out)


# --------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "scripted-model/1"

    # set on the class by main()
    log_path: str = ""
    expect_key: str | None = None
    workdir_hint: str | None = None
    log_lock = threading.Lock()

    def log_message(self, fmt, *args):  # silence default stderr logging
        pass

    # -- helpers ---------------------------------------------------------
    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            total = 0
            while True:
                size_line = self.rfile.readline(1024)
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                total += size
                if total > MAX_BODY:
                    raise ValueError("body too large")
                chunks.append(self.rfile.read(size))
                self.rfile.readline(1024)
            raw = b"".join(chunks)
        else:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                raise ValueError("body too large")
            raw = self.rfile.read(length) if length else b""
        enc = (self.headers.get("Content-Encoding") or "").lower().strip()
        if enc == "gzip":
            raw = gzip.decompress(raw)
        elif enc == "deflate":
            raw = zlib.decompress(raw)
        elif enc not in ("", "identity"):
            raise ValueError("unsupported Content-Encoding %r" % enc)
        return raw

    def _credential(self):
        key = self.headers.get("x-api-key")
        if key is not None:
            return "x-api-key", key
        auth = self.headers.get("Authorization")
        if auth is not None:
            return "authorization", auth
        return None, None

    def _credential_ok(self, header, value) -> bool:
        if self.expect_key is None:
            return True
        if header == "x-api-key":
            return value == self.expect_key
        if header == "authorization":
            return value == "Bearer " + self.expect_key
        return False

    def _send(self, status: int, ctype: str, payload: bytes, extra=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if ctype == "text/event-stream":
            self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(payload)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        self.wfile.flush()

    def _send_error_json(self, status: int, etype: str, message: str, api: str):
        if api == "openai":
            payload = {"error": {"message": message, "type": etype, "code": etype}}
        else:
            payload = {"type": "error", "error": {"type": etype, "message": message}}
        self._send(status, "application/json", json.dumps(payload).encode())

    def _log(self, entry: dict):
        line = json.dumps(entry, sort_keys=False) + "\n"
        with self.log_lock:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(line)
                f.flush()

    # -- dispatch --------------------------------------------------------
    def _handle(self):
        started = time.time()
        path = urlsplit(self.path).path
        header, cred = self._credential()
        entry = {
            "ts": _now(), "method": self.command, "path": self.path,
            "credential_header": header, "credential": cred,
            "user_agent": self.headers.get("User-Agent"),
            "model": None, "stream": None, "api": None, "kind": None, "turn": None,
            "command": None, "tool_results": [], "status": None,
        }
        try:
            body_raw = b""
            if self.command in ("POST", "PUT", "PATCH"):
                body_raw = self._read_body()
            body = {}
            if body_raw:
                try:
                    body = json.loads(body_raw)
                except ValueError as exc:
                    body = None
                    entry["body_error"] = "invalid JSON: %s" % exc
            if isinstance(body, dict):
                entry["model"] = body.get("model")
                entry["stream"] = bool(body.get("stream"))

            if path in ("/v1/messages", "/v1/messages/count_tokens"):
                api = "anthropic"
            elif path in ("/v1/responses", "/v1/models", "/models", "/responses"):
                api = "openai"
            else:
                api = None
            entry["api"] = api

            if api is None:
                entry["kind"] = "not_found"
                entry["status"] = 404
                self._send_error_json(404, "not_found_error", "scripted model: no route for %s %s"
                                      % (self.command, path), "anthropic")
                return
            if not self._credential_ok(header, cred):
                entry["kind"] = "unauthorized"
                entry["status"] = 401
                self._send_error_json(401, "authentication_error", "invalid x-api-key"
                                      if api == "anthropic" else "Incorrect API key provided", api)
                return
            if body is None or (self.command == "POST" and not isinstance(body, dict)):
                entry["kind"] = "bad_request"
                entry["status"] = 400
                self._send_error_json(400, "invalid_request_error", "body is not a JSON object", api)
                return

            if path == "/v1/messages" and self.command == "POST":
                plan = anthropic_plan(body)
                ctype, payload = anthropic_response(body, plan, bool(body.get("stream")))
            elif path == "/v1/messages/count_tokens" and self.command == "POST":
                plan = {"kind": "count_tokens", "turn": None, "results": []}
                ctype, payload = "application/json", json.dumps({"input_tokens": 10}).encode()
            elif path in ("/v1/responses", "/responses") and self.command == "POST":
                plan = openai_plan(body, self.workdir_hint)
                ctype, payload = openai_response(body, plan, bool(body.get("stream")))
            elif path in ("/v1/models", "/models") and self.command == "GET":
                plan = {"kind": "models", "turn": None, "results": []}
                ctype, payload = "application/json", json.dumps({
                    "object": "list",
                    "data": [{"id": "scripted-model", "object": "model", "created": 0,
                              "owned_by": "scripted"}],
                    "models": [],
                }).encode()
            else:
                entry["kind"] = "not_found"
                entry["status"] = 404
                self._send_error_json(404, "not_found_error", "scripted model: no route for %s %s"
                                      % (self.command, path), api)
                return
            entry["kind"] = plan["kind"]
            entry["turn"] = plan.get("turn")
            entry["command"] = plan.get("command")
            entry["tool_results"] = plan.get("results", [])
            if plan.get("side_reason"):
                entry["side_reason"] = plan["side_reason"]
            if plan.get("tool_style"):
                entry["tool_style"] = plan["tool_style"]
            if plan.get("kind") in ("main", "side"):
                entry["reply_text"] = plan.get("text")
                entry["tool_names"] = plan.get("tool_names")
            entry["status"] = 200
            self._send(200, ctype, payload)
        except Exception as exc:  # log and answer 500 rather than dying
            entry["status"] = 500
            entry["error"] = "%s: %s" % (type(exc).__name__, exc)
            try:
                self._send_error_json(500, "api_error", "scripted model internal error", "anthropic")
            except Exception:
                pass
            self.close_connection = True
        finally:
            entry["elapsed_ms"] = int((time.time() - started) * 1000)
            self._log(entry)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--log", required=True)
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--expect-key")
    ap.add_argument("--workdir-hint",
                    help="absolute workdir passed as `workdir` to Codex shell tools that accept one")
    args = ap.parse_args(argv)

    Handler.log_path = args.log
    Handler.expect_key = args.expect_key
    Handler.workdir_hint = args.workdir_hint
    open(args.log, "a").close()

    httpd = Server((args.host, args.port), Handler)
    if args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    port = httpd.server_address[1]

    def _stop(signum, frame):
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)

    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.replace(tmp, args.port_file)
    else:
        print(port, flush=True)
    try:
        httpd.serve_forever(poll_interval=0.2)
    finally:
        httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
