# What an installed airlock must do from its own files, whichever way it was installed (sourced by
# tests/install_test.sh for `cmake --install` and tests/deb_test.sh for the Debian package).
# check_installed_tree PREFIX SCRATCH: PREFIX holds bin/ and share/; SCRATCH is a directory the
# caller removes. Calls fail (defined by the caller) on the first thing that is wrong.
check_installed_tree() {
  local prefix=$1 scratch=$2 airlock=$1/bin/airlock out page rendered warnings name known
  local state=$scratch/state workspace=$scratch/workspace
  out=$("$airlock" --version 2>&1) || fail "airlock --version failed: $out"
  grep -q '^airlock [0-9][^ ]* revision ' <<<"$out" || fail "airlock --version: $out"
  "$airlock" --state-dir "$state" doctor > /dev/null || fail "the installed airlock's doctor failed"
  # The quick start: the built-in default policy, a workspace, a confined command.
  mkdir -p "$workspace" && echo hi > "$workspace/quick-start.txt"
  out=$(cd "$scratch" && "$airlock" --state-dir "$state" run --workspace "$workspace" -- ls 2>&1) ||
    fail "the installed airlock could not run the quick start: $out"
  grep -q '^quick-start.txt$' <<<"$out" || fail "the quick start did not list its workspace: $out"

  # A man page for airlock and one per verb, each rendering without a groff warning.
  [ -f "$prefix/share/man/man1/airlock.1" ] || fail "share/man/man1/airlock.1 is not installed"
  for verb in run doctor mcp serve vm policy; do
    [ -f "$prefix/share/man/man1/airlock-$verb.1" ] || fail "share/man/man1/airlock-$verb.1 is not installed"
  done
  for page in "$prefix"/share/man/man1/*.1; do
    rendered=$(MANWIDTH=100 man --warnings -l "$page" 2> "$scratch/man.err") || fail "man -l $page failed: $(cat "$scratch/man.err")"
    warnings=$(cat "$scratch/man.err")
    [ -z "$warnings" ] || fail "man -l $page warns: $warnings"
    grep -q '^NAME' <<<"$rendered" || fail "man -l $page has no NAME section: $rendered"
  done
  grep -q -- '--policy' <<<"$(MANWIDTH=100 man -l "$prefix/share/man/man1/airlock-run.1" 2>/dev/null)" ||
    fail "airlock-run(1) does not list --policy"

  # The bash completion sources, and completes verbs, a verb's subcommands and its options.
  local completion=$prefix/share/bash-completion/completions/airlock
  [ -f "$completion" ] || fail "share/bash-completion/completions/airlock is not installed"
  complete_words() {  # the words bash offers after `airlock WORD...` (the last one being typed)
    bash --norc --noprofile -c 'set -eu; source "$1"; shift; COMP_WORDS=(airlock "$@"); COMP_CWORD=$#
      _airlock; printf "%s\n" "${COMPREPLY[@]}"' _ "$completion" "$@"
  }
  out=$(bash --norc --noprofile -c 'set -eu; source "$1"; complete -p airlock' _ "$completion" 2>&1) ||
    fail "the completion does not source in bash: $out"
  grep -qx run <<<"$(complete_words r)" || fail "completion of 'airlock r' lacks run: $(complete_words r)"
  grep -qx build <<<"$(complete_words vm '')" || fail "completion of 'airlock vm ' lacks build: $(complete_words vm '')"
  grep -qx -- --workspace <<<"$(complete_words run --w)" || fail "completion of 'airlock run --w' lacks --workspace"
  grep -qx -- --state-dir <<<"$(complete_words run --st)" || fail "completion of 'airlock run --st' lacks the global --state-dir"
  grep -qx development <<<"$(complete_words --profile '')" || fail "completion of 'airlock --profile ' lacks development"

  # The zsh completion: the same walk, entered as zsh's completion system enters it (words,
  # CURRENT), with compadd, _files and _normal standing in for the system's own: what it offers,
  # and that a command inside `airlock run` is completed as zsh completes that command.
  local zcompletion= candidate
  for candidate in "$prefix"/share/zsh/{vendor-completions,site-functions}/_airlock; do
    [ -f "$candidate" ] && zcompletion=$candidate
  done
  [ -n "$zcompletion" ] || fail "share/zsh/{vendor-completions,site-functions}/_airlock is not installed"
  out=$(zsh -f -c 'fpath=("$1" $fpath); autoload -U compinit; compinit -u -d "$2"; print -r -- ${_comps[airlock]}' \
        _ "$(dirname "$zcompletion")" "$scratch/zcompdump" 2>&1)
  [ "$out" = _airlock ] || fail "zsh's compinit does not take $zcompletion for airlock: $out"
  zsh_words() {
    zsh -f -c 'compadd() { [[ $1 == -a ]] && print -l -- "${(@P)2}"; }
      _files() { print -- "<files>"; }
      _normal() { print -- "<normal $CURRENT: ${words[*]}>"; }
      f=$1; shift; words=(airlock "$@"); CURRENT=$#words; source "$f"' _ "$zcompletion" "$@"
  }
  expect_zsh() {  # expect_zsh LINE WORD...: zsh offers LINE after `airlock WORD...`
    local line=$1 got
    shift
    got=$(zsh_words "$@" 2>&1) || fail "zsh completion of 'airlock $*' failed: $got"
    grep -qxF -- "$line" <<<"$got" || fail "zsh completion of 'airlock $*' lacks '$line': $got"
  }
  expect_zsh run r
  expect_zsh build vm ''
  expect_zsh --workspace run --w
  expect_zsh --state-dir run --st
  expect_zsh development --profile ''
  expect_zsh '<files>' run --workspace ''
  expect_zsh '<normal 2: git ch>' run git ch
  expect_zsh '<normal 1: >' run --workspace /tmp -- ''
  expect_zsh '<normal 2: git st>' --profile development run -q -- git st

  # The agent profiles: each installed file is one the installed airlock carries built in.
  known=$("$airlock" --state-dir "$state" agent run --profile no-such-profile -- true 2>&1 || true)
  local n=0
  for profile in "$prefix"/share/airlock/agents/*.json; do
    [ -f "$profile" ] || fail "no agent profiles in share/airlock/agents"
    name=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["name"])' "$profile")
    grep -qE "known: .*\\b$name\\b" <<<"$known" || fail "share/airlock/agents/$(basename "$profile") is not a profile airlock knows: $known"
    n=$((n + 1))
  done
  [ "$n" -ge 3 ] || fail "only $n agent profiles installed"
}
