import http.client, json, socket, sys  # drive `airlock serve` over its unix socket: standard library only

class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.socket_path = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.socket_path)

socket_path, policy_file = sys.argv[1:3]
conn = UnixConnection(socket_path)
def call(method, path, body=None):
    conn.request(method, path, json.dumps(body) if body is not None else None, {"Content-Type": "application/json"})
    reply = conn.getresponse()
    return reply.status, json.loads(reply.read())

status, opened = call("POST", "/v1/sessions", json.load(open(policy_file)))
if status != 201:
    sys.exit(f"refused: {opened['error']['code']}: {opened['error']['message']}")
s = "/v1/sessions/" + opened["session"]
print("executor:", opened["executor"])  # what enforces, from the session.open receipt
print("read:", call("POST", s + "/read_file", {"path": "src/app.py"})[1]["content"].strip())
status, refused = call("POST", s + "/read_file", {"path": "../../etc/passwd"})
print("refused:", status, refused["error"]["code"])
print("wrote:", call("POST", s + "/write_file", {"path": "reports/notes.txt", "content": "checked\n"})[0] == 200)
print("closed:", call("POST", s + "/close")[1]["written_back"]["written"])
print("receipts:", len(call("GET", s + "/receipts")[1]["receipts"]))
