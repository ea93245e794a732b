# Sourced by scripts of this folder (bench-service.sh, verifier-stats.sh),
# after they set `me` to their name.
# shellcheck shell=bash
: "${me:=khagent}"

die() { echo "$me: error: $*" >&2; exit 1; }
warn() { echo "$me: warning: $*" >&2; }
log() { echo "$me: $*" >&2; }

# For --write-docs, which keeps a generated section of a doc up to date:
# doc_section_write DOC NAME REPORT: puts the file REPORT between the lines
# <!-- NAME:begin --> and <!-- NAME:end --> of DOC, in place of what was
# there; appends the markers and REPORT when DOC has no such section (or does
# not exist yet).
doc_section_write() {
  local doc=$1 name=$2 report=$3 begin end section new
  begin="<!-- $name:begin -->" end="<!-- $name:end -->"
  section="$(mktemp)" new="$(mktemp)"
  { echo "$begin"; cat "$report"; echo "$end"; } >"$section"
  if [[ -f "$doc" ]] && grep -qF "$begin" "$doc" && grep -qF "$end" "$doc"; then
    awk -v b="$begin" -v e="$end" -v s="$section" '
      $0 == b {while ((getline l < s) > 0) print l; skip = 1; next}
      $0 == e {skip = 0; next}
      !skip {print}' "$doc" >"$new"
  else
    { [[ ! -f "$doc" ]] || { cat "$doc"; echo; }; cat "$section"; } >"$new"
  fi
  cat "$new" >"$doc"
  rm -f "$section" "$new"
}
