"""The examples every command's --help ends with (issue 14 item 10), kept in one place.

rmqtool.app applies them as the epilog when it registers each command, so command modules need not change for
them; tests/cli/test_help_examples.py checks every command has two or three and that their options exist. Each
example is a real command on a store written by `rmqtool put` (~/store) or on the files it names.
"""
from __future__ import annotations

EXAMPLES: dict[str, list[str]] = {
    "put": [
        "rmqtool put -s ~/store -t TopicTest --keys 'order-1 user-7' --tags TagA --body hello",
        "rmqtool put -s ~/store --from-jsonl messages.jsonl --sync-flush -Q",
        "rmqtool put -s ~/store -t TopicTest -q 3 -p TRACE_ON=false --body-file payload.bin --json",
    ],
    "query-key": [
        "rmqtool query-key -s ~/store -t TopicTest -k order-1",
        "rmqtool query-key -s ~/store -t TopicTest -k order-1 --begin now-1d --count 10 --explain",
        "rmqtool query-key -s ~/store -t TopicTest -k 7F00000120582A48AFD974F7F4DA4E1C --unique-key --json",
    ],
    "get": [
        "rmqtool get -s ~/store --offset 0",
        "rmqtool get -s ~/store --msg-id 7F00000100002A9F0000000000000000 --json",
        "rmqtool get -s ~/store -t TopicTest -q 3 --queue-offset 1200 --count 50 --json",
    ],
    "dump-commitlog": [
        "rmqtool dump-commitlog -s ~/store --topic TopicTest --begin now-1h --count 20",
        "rmqtool dump-commitlog -s ~/store --from-offset 1048576 --json | jq -c '[.queueOffset, .keys]'",
        "rmqtool dump-commitlog -s ~/store --files 00000000001073741824 --body hex --json > seg1.ndjson",
    ],
    "inspect-index": [
        "rmqtool inspect-index -s ~/store",
        "rmqtool inspect-index -s ~/store --walk-key TopicTest#order-1 --count 50",
        "rmqtool inspect-index -s ~/store --stats --verify --json",
    ],
    "recover": [
        "rmqtool recover -s ~/store --dry-run",
        "rmqtool recover -s ~/store --full-scan --json",
        "rmqtool recover -c /opt/rocketmq/conf/broker.conf",
    ],
    "clean": [
        "rmqtool clean -s ~/store --dry-run",
        "rmqtool clean -s ~/store --reserved-hours 48",
        "rmqtool clean -s ~/store --force-now --dry-run --json",
    ],
    "spark-reindex": [
        "rmqtool spark-reindex -s ~/store --master inline --dry-run",
        "rmqtool spark-reindex -s ~/store -o /tmp/index-rebuilt --master 'local[2]'",
        "rmqtool spark-reindex -s ~/store --master inline --replace --json",
    ],
    "demo": [
        "rmqtool demo",
        "rmqtool demo /tmp/sample-store --messages 500 --master inline",
    ],
    "print-msg": [
        "rmqtool print-msg -s ~/store --topic TopicTest --begin now-1h --end now",
        "rmqtool print-msg -s ~/store -t TopicTest -q 2 --begin 2024-01-31 --end 2024-01-31 --tags 'TagA || TagB'",
        "rmqtool print-msg -s ~/store -t TopicTest --begin 1706659200000 --end now --count 100 --json | jq .msgId",
    ],
    "queues": [
        "rmqtool queues -s ~/store",
        "rmqtool queues -s ~/store --topic TopicTest",
        "rmqtool queues -s ~/store --json | jq '.queues[] | select(.messages > 0)'",
    ],
    "dump-cq": [
        "rmqtool dump-cq -s ~/store --topic TopicTest --queue-id 0",
        "rmqtool dump-cq -s ~/store -t TopicTest -q 3 --queue-offset 1200 --count 50",
        "rmqtool dump-cq -s ~/store -t TopicTest -q 0 --count 1000 --json | jq 'select(.status != \"OK\")'",
    ],
    "verify-cq": [
        "rmqtool verify-cq -s ~/store",
        "rmqtool verify-cq -s ~/store --source rocksdb --topic TopicTest",
        "rmqtool verify-cq -s ~/store --compare --json | jq '.firstDifferences'",
    ],
    "consumers": [
        "rmqtool consumers -s ~/store",
        "rmqtool consumers -s ~/store --group please_rename_unique_group_name",
        "rmqtool consumers -s ~/store --json | jq '.groups[] | {group, diffTotal}'",
    ],
    "delays": [
        "rmqtool delays -s ~/store",
        "rmqtool delays -c /opt/rocketmq/conf/broker.conf",
        "rmqtool delays -s ~/store --json | jq '.levels[] | select(.pending > 0)'",
    ],
    "info": [
        "rmqtool info -s ~/store",
        "rmqtool info -c /opt/rocketmq/conf/broker.conf --json | jq '.commitLog.maxOffset, .tiered.flatStore'",
        "rmqtool info -s ~/store --json | jq '.placeholders[] | {commitLogOffset, origin, present}'",
    ],
    "prune": [
        "rmqtool prune -s ~/store --dry-run",
        "rmqtool prune -s ~/store --older-than 7d",
        "rmqtool prune -s ~/store --older-than 12h --dry-run --json",
    ],
    "tiered": [
        "rmqtool tiered queues -T /data/tiered -s ~/store",
        "rmqtool tiered get -T /data/tiered -s ~/store -t TopicTest -q 0 -i 0 -n 10",
        "rmqtool tiered verify -T /data/tiered -s ~/store --json",
    ],
    "tiered queues": [
        "rmqtool tiered queues -T /data/tiered -s ~/store",
        "rmqtool tiered queues -c /opt/rocketmq/conf/broker.conf --topic TopicTest --json",
    ],
    "tiered segments": [
        "rmqtool tiered segments -T /data/tiered -s ~/store -t TopicTest -q 0",
        "rmqtool tiered segments -T /data/tiered --metadata meta.json -t TopicTest -q 0 --json",
    ],
    "tiered get": [
        "rmqtool tiered get -T /data/tiered -s ~/store -t TopicTest -q 0 --queue-offset 0",
        "rmqtool tiered get -T /data/tiered -s ~/store -t TopicTest -q 0 -i 100 --count 32 --raw --json",
        "rmqtool tiered get -T /data/tiered -s ~/store -t TopicTest -q 0 -i 100 --count 32 --as-consumer",
    ],
    "tiered offset-by-time": [
        "rmqtool tiered offset-by-time -T /data/tiered -s ~/store -t TopicTest -q 0 --timestamp now-1h",
        "rmqtool tiered offset-by-time -T /data/tiered -s ~/store -t TopicTest -q 0 --timestamp 2024-01-31 "
        "--timestamp 1706659200000 --boundary upper --json",
    ],
    "tiered dump-cq": [
        "rmqtool tiered dump-cq -T /data/tiered -s ~/store -t TopicTest -q 0",
        "rmqtool tiered dump-cq -T /data/tiered -s ~/store -t TopicTest -q 0 --json | jq .commitLogOffset",
    ],
    "tiered verify": [
        "rmqtool tiered verify -T /data/tiered -s ~/store",
        "rmqtool tiered verify -T /data/tiered -s ~/store --topic TopicTest --json",
    ],
    "tiered dispatch": [
        "rmqtool tiered dispatch -s ~/store -T /data/tiered --master inline --dry-run",
        "rmqtool tiered dispatch -s ~/store -T /data/tiered -t TopicTest --master 'local[2]' --json",
    ],
    "tiered clean": [
        "rmqtool tiered clean -T /data/tiered -s ~/store --reserved-hours 72 --dry-run",
        "rmqtool tiered clean -T /data/tiered -s ~/store --reserved-hours 24 --now 2024-02-01T00:00 --json",
    ],
    "tiered query-key": [
        "rmqtool tiered query-key -T /data/tiered -s ~/store -t TopicTest -k order-1",
        "rmqtool tiered query-key -c /opt/rocketmq/conf/broker.conf -t TopicTest -k order-1 --as-broker --json",
        "rmqtool tiered query-key -T /data/tiered -s ~/store --from-jsonl questions.jsonl > answers.jsonl",
    ],
    "tiered inspect-index": [
        "rmqtool tiered inspect-index -T /data/tiered -s ~/store",
        "rmqtool tiered inspect-index -T /data/tiered -s ~/store --walk-key TopicTest#order-1 --json",
        "rmqtool tiered inspect-index -T /data/tiered -s ~/store --verify",
    ],
    "tiered compact-index": [
        "rmqtool tiered compact-index ~/store/tiered_index_file/1706659200000 -o compacted.idx",
        "rmqtool tiered compact-index ~/store/tiered_index_file/1706659200000 -o compacted.idx --mapped --json",
    ],
    "tiered reindex": [
        "rmqtool tiered reindex -s ~/store --broker-name broker-a -o /tmp/tiered-index --master inline",
        "rmqtool tiered reindex -c /opt/rocketmq/conf/broker.conf -o /tmp/tiered-index --dry-run --json",
    ],
    "tiered rebuild-metadata": [
        "rmqtool tiered rebuild-metadata -T /data/tiered -o rebuilt.json",
        "rmqtool tiered rebuild-metadata -T /data/tiered -o rebuilt.json --from old.json.bak --json",
    ],
    "doctor": [
        "rmqtool doctor -s ~/store",
        "rmqtool doctor -c /opt/rocketmq/conf/broker.conf --json | jq -r '.findings[] | select(.severity == \"error\") | .fix'",
        "rmqtool doctor -s ~/store -T /data/tiered --deep",
    ],
    "repair": [
        "rmqtool repair config -s ~/store consumerOffset.json --from-bak",
        "rmqtool repair consume-queue -s ~/store --topic TopicTest --queue-id 3 --dry-run",
        "rmqtool repair timer -c /opt/rocketmq/conf/broker.conf --dry-run",
    ],
    "repair config": [
        "rmqtool repair config -s ~/store consumerOffset.json --from-bak",
        "rmqtool repair config -s ~/store delayOffset.json --from-store --dry-run",
        "rmqtool repair config -s ~/store consumerFilter.json --empty",
    ],
    "repair consume-queue": [
        "rmqtool repair consume-queue -s ~/store --dry-run",
        "rmqtool repair consume-queue -s ~/store --topic TopicTest --queue-id 3",
    ],
    "repair timer": [
        "rmqtool repair timer -c /opt/rocketmq/conf/broker.conf --dry-run",
        "rmqtool repair timer -c /opt/rocketmq/conf/broker.conf --json",
    ],
    "timer": [
        "rmqtool timer inspect -s ~/store",
        "rmqtool timer list -c /opt/rocketmq/conf/broker.conf --topic TopicTest --due-before now+1h",
        "rmqtool timer verify -s ~/store --json",
    ],
    "timer inspect": [
        "rmqtool timer inspect -s ~/store",
        "rmqtool timer inspect -c /opt/rocketmq/conf/broker.conf --json | jq .wheel.liveSlots",
    ],
    "timer list": [
        "rmqtool timer list -s ~/store",
        "rmqtool timer list -s ~/store --topic TopicTest --due-after now --due-before now+1d",
        "rmqtool timer list -c /opt/rocketmq/conf/broker.conf --json | jq -c '[.uniqKey, .fireAtMs]'",
    ],
    "timer verify": [
        "rmqtool timer verify -s ~/store",
        "rmqtool timer verify -c /opt/rocketmq/conf/broker.conf --now 2024-02-01T00:00 --json",
    ],
}


#: Help lines stay within 80 columns (docs/output-contract.md): an example wider than that is continued on the
#: next lines with a shell's backslash, cut between words (a quoted argument is never cut).
EXAMPLE_WIDTH = 80
INDENT, CONTINUED = "  ", "      "


def words(line: str) -> list[str]:
    """`line` cut at the spaces outside quotes (each word keeps its quotes)."""
    out, cur, quote = [], "", None
    for ch in line:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == " ":
            if cur:
                out.append(cur)
            cur = ""
            continue
        cur += ch
    return out + ([cur] if cur else [])


def example_lines(line: str, width: int = EXAMPLE_WIDTH) -> list[str]:
    """One example as help prints it: indented, continued with ` \\` where it would pass `width`; a word that
    is wider alone keeps its own line."""
    out, cur = [], INDENT
    for w in words(line):
        if cur.strip() and len(cur) + 1 + len(w) + 2 > width:
            out.append(cur + " \\")
            cur = CONTINUED + w
        else:
            cur = (cur + " " + w) if cur.strip() else cur + w
    return out + [cur]


def joined(lines: list[str]) -> list[str]:
    """The examples printed by --help back as EXAMPLES holds them (continued lines joined)."""
    out, cur = [], ""
    for ln in lines:
        text = ln.strip()
        cur = f"{cur} {text}" if cur else text
        if cur.endswith(" \\"):
            cur = cur[:-2]
        else:
            out.append(cur)
            cur = ""
    return out + ([cur] if cur else [])


def epilog(name: str) -> str:
    """The help epilog of command `name` ("tiered get" for a subcommand): its examples, one paragraph each."""
    lines = [ln for example in EXAMPLES[name] for ln in example_lines(example, EXAMPLE_WIDTH - 2)]  # click indents 2
    # \b: click prints the paragraph as it is (no re-wrapping of a command line)
    return "Examples:\n\n\b\n" + "\n".join(lines) + "\n"
