import json, subprocess, sys  # drive an airlock session from Python: one JSON line each way
airlock, policy, workspace = sys.argv[1:4]
p = subprocess.Popen([airlock, "session", "--policy", policy, "--workspace", workspace], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
act = lambda **req: (p.stdin.write(json.dumps(req) + "\n"), p.stdin.flush(), json.loads(p.stdout.readline()))[2]
print("executor:", json.loads(p.stdout.readline())["result"]["executor"])  # the first line: what enforces
print("read:", act(action="read_file", path="src/app.py")["result"]["content"].strip())
print("refused:", act(action="read_file", path="../../etc/passwd")["error"]["code"])
print("wrote:", act(action="write_file", path="reports/notes.txt", content="checked\n")["ok"])
print("closed:", act(action="close")["result"]["written_back"]["written"])
p.stdin.close(); p.wait()
