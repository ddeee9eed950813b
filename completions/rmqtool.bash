# bash completion for rmqtool (static; regenerate with scripts/regen.py)
_rmqtool() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" cmd="" w i
    # the command path typed so far: the first word that is not an option, and a group's subcommand
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${COMP_WORDS[i]}"
        case "$w" in -*) continue ;; esac
        if [[ -z "$cmd" ]]; then
            cmd="$w"
            case "$cmd" in repair|tiered|timer) ;; *) break ;; esac
        else
            cmd="$cmd $w"
            break
        fi
    done
    _rmqtool_words() { mapfile -t COMPREPLY < <(compgen -W "$1" -- "$cur"); }
    case "$cmd" in
        "")
            _rmqtool_words "clean consumers delays demo doctor dump-commitlog dump-cq get info inspect-index print-msg prune put query-key queues recover repair spark-reindex tiered timer verify-cq --version -V --debug --install-completion --show-completion --help" ;;
        "clean")
            case "$prev" in
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --reserved-hours|--hash-slots|--max-index|--commitlog-file-size|--cq-file-size|--workers) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --reserved-hours --dry-run --force-now --keep-timer-messages --json --quiet -Q --hash-slots --max-index --commitlog-file-size --cq-file-size --workers --help" ;;
        "consumers")
            case "$prev" in
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --group|-g) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --group -g --json --quiet -Q --help" ;;
        "delays")
            case "$prev" in
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --json --quiet -Q --help" ;;
        "demo")
            case "$prev" in
                --messages|-n) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
                --master) _rmqtool_words "local[2] inline none"; return ;;
            esac
            _rmqtool_words "--messages -n --master --help" ;;
        "doctor")
            case "$prev" in
                --store|-s|--tiered-store-path|-T) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --now|--hash-slots|--max-index|--commitlog-file-size|--cq-file-size|--workers) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --deep --now --json --quiet -Q --hash-slots --max-index --commitlog-file-size --cq-file-size --tiered-store-path -T --workers --help" ;;
        "dump-commitlog")
            case "$prev" in
                --store|-s|--body-dir) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --topic|-t|--begin|-b|--end|-e|--from-offset|--to-offset|--files|--count|-n|--max-message-size|--commitlog-file-size|--workers) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
                --body) _rmqtool_words "none utf8 hex base64"; return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --topic -t --begin -b --end -e --from-offset --to-offset --files --count -n --body --body-dir --max-message-size --no-check-crc --json --quiet -Q --commitlog-file-size --workers --help" ;;
        "dump-cq")
            case "$prev" in
                --topic|-t|--queue-id|-q|--queue-offset|-i|--count|-n) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            _rmqtool_words "--topic -t --queue-id -q --store -s --broker-conf -c --queue-offset -i --count -n --no-check-crc --json --quiet -Q --help" ;;
        "get")
            case "$prev" in
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c|--from-file|-f) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --offset|-o|--msg-id|-m|--topic|-t|--queue-id|-q|--queue-offset|-i|--count|-n|--hash-slots|--max-index|--commitlog-file-size) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --offset -o --msg-id -m --from-file -f --topic -t --queue-id -q --queue-offset -i --count -n --json --quiet -Q --hash-slots --max-index --commitlog-file-size --help" ;;
        "info")
            case "$prev" in
                --store|-s|--tiered-store-path|-T) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --json --quiet -Q --tiered-store-path -T --help" ;;
        "inspect-index")
            case "$prev" in
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --walk-slot|--walk-key|--count|-n|--hash-slots|--max-index|--commitlog-file-size|--workers) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --walk-slot --walk-key --count -n --stats --verify --json --quiet -Q --hash-slots --max-index --commitlog-file-size --workers --help" ;;
        "print-msg")
            case "$prev" in
                --topic|-t|--begin|-b|--end|-e|--queue-id|-q|--tags|--count|-n) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            _rmqtool_words "--topic -t --begin -b --end -e --store -s --broker-conf -c --queue-id -q --tags --count -n --no-check-crc --scan-log --json --quiet -Q --help" ;;
        "prune")
            case "$prev" in
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --older-than) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --older-than --dry-run --json --quiet -Q --help" ;;
        "put")
            case "$prev" in
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c|--body-file|--from-jsonl) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --topic|-t|--tags|--keys|-k|--body|--queue-id|-q|--property|-p|--store-timestamp|--hash-slots|--max-index|--commitlog-file-size|--cq-file-size) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --topic -t --tags --keys -k --body --body-file --queue-id -q --property -p --store-timestamp --from-jsonl --sync-flush --json --quiet -Q --hash-slots --max-index --commitlog-file-size --cq-file-size --create --help" ;;
        "query-key")
            case "$prev" in
                --topic|-t|--key|-k|--begin|-b|--end|-e|--count|-n|--hash-slots|--max-index|--commitlog-file-size) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            _rmqtool_words "--topic -t --key -k --store -s --broker-conf -c --begin -b --end -e --count -n --unique-key --raw --explain --json --quiet -Q --hash-slots --max-index --commitlog-file-size --help" ;;
        "queues")
            case "$prev" in
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --topic|-t) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --topic -t --json --quiet -Q --help" ;;
        "recover")
            case "$prev" in
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --hash-slots|--max-index|--commitlog-file-size|--cq-file-size|--workers) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --dry-run --no-check-crc --index-safe --full-scan --force --json --quiet -Q --hash-slots --max-index --commitlog-file-size --cq-file-size --workers --help" ;;
        "repair")
            _rmqtool_words "config consume-queue timer --help" ;;
        "repair config")
            case "$prev" in
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --hash-slots|--max-index|--commitlog-file-size|--cq-file-size) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --from-bak --from-store --empty --dry-run --json --quiet -Q --hash-slots --max-index --commitlog-file-size --cq-file-size --help" ;;
        "repair consume-queue")
            case "$prev" in
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --topic|-t|--queue-id|-q|--hash-slots|--max-index|--commitlog-file-size|--cq-file-size) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --topic -t --queue-id -q --rebuild --dry-run --json --quiet -Q --hash-slots --max-index --commitlog-file-size --cq-file-size --help" ;;
        "repair timer")
            case "$prev" in
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --hash-slots|--max-index|--commitlog-file-size|--cq-file-size) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --dry-run --json --quiet -Q --hash-slots --max-index --commitlog-file-size --cq-file-size --help" ;;
        "spark-reindex")
            case "$prev" in
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c|--out|-o) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --master) _rmqtool_words "local[*] inline"; return ;;
                --conf|--hash-slots|--max-index|--commitlog-file-size|--workers) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --out -o --master --conf --dry-run --replace --json --quiet -Q --hash-slots --max-index --commitlog-file-size --new-geometry --workers --help" ;;
        "tiered")
            _rmqtool_words "clean compact-index dispatch dump-cq get inspect-index offset-by-time query-key queues rebuild-metadata reindex segments verify --help" ;;
        "tiered clean")
            case "$prev" in
                --reserved-hours|--now|--cluster-name|--broker-name|--topic|-t) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
                --tiered-store-path|-T|--store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --metadata|--broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            _rmqtool_words "--reserved-hours --now --dry-run --tiered-store-path -T --metadata --store -s --broker-conf -c --cluster-name --broker-name --topic -t --json --quiet -Q --help" ;;
        "tiered compact-index")
            case "$prev" in
                --out|-o|--broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --hash-slots|--max-index) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--out -o --force --mapped --json --quiet -Q --hash-slots --max-index --broker-conf -c --new-geometry --help" ;;
        "tiered dispatch")
            case "$prev" in
                --tiered-store-path|-T|--store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --metadata|--broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --cluster-name|--broker-name|--topic|-t|--commitlog-max-size|--consume-queue-max-size) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
                --master) _rmqtool_words "local[*] inline"; return ;;
            esac
            _rmqtool_words "--tiered-store-path -T --metadata --store -s --broker-conf -c --cluster-name --broker-name --topic -t --commitlog-max-size --consume-queue-max-size --master --dry-run --json --quiet -Q --help" ;;
        "tiered dump-cq")
            case "$prev" in
                --topic|-t|--queue-id|-q|--cluster-name|--broker-name) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
                --tiered-store-path|-T|--store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --metadata|--broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            _rmqtool_words "--topic -t --queue-id -q --tiered-store-path -T --metadata --store -s --broker-conf -c --cluster-name --broker-name --json --quiet -Q --help" ;;
        "tiered get")
            case "$prev" in
                --topic|-t|--queue-id|-q|--queue-offset|-i|--count|-n|--cluster-name|--broker-name) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
                --tiered-store-path|-T|--store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --metadata|--broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            _rmqtool_words "--topic -t --queue-id -q --queue-offset -i --count -n --raw --as-consumer --tiered-store-path -T --metadata --store -s --broker-conf -c --cluster-name --broker-name --json --quiet -Q --help" ;;
        "tiered inspect-index")
            case "$prev" in
                --walk-slot|--walk-key|--count|-n|--cluster-name|--broker-name|--hash-slots|--max-index|--workers) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
                --tiered-store-path|-T|--store|-s|--tiered-dir) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --metadata|--broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            _rmqtool_words "--walk-slot --walk-key --count -n --stats --verify --json --quiet -Q --tiered-store-path -T --metadata --store -s --broker-conf -c --cluster-name --broker-name --tiered-dir --hash-slots --max-index --workers --help" ;;
        "tiered offset-by-time")
            case "$prev" in
                --topic|-t|--queue-id|-q|--timestamp|--cluster-name|--broker-name) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
                --boundary) _rmqtool_words "lower upper"; return ;;
                --tiered-store-path|-T|--store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --metadata|--broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            _rmqtool_words "--topic -t --queue-id -q --timestamp --boundary --tiered-store-path -T --metadata --store -s --broker-conf -c --cluster-name --broker-name --json --quiet -Q --help" ;;
        "tiered query-key")
            case "$prev" in
                --topic|-t|--key|-k|--begin|-b|--end|-e|--count|-n|--cluster-name|--broker-name|--hash-slots|--max-index) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
                --from-jsonl|--metadata|--broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --tiered-store-path|-T|--store|-s|--tiered-dir) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
            esac
            _rmqtool_words "--topic -t --key -k --begin -b --end -e --count -n --unique-key --raw --as-broker --explain --from-jsonl --json --quiet -Q --tiered-store-path -T --metadata --store -s --broker-conf -c --cluster-name --broker-name --tiered-dir --hash-slots --max-index --help" ;;
        "tiered queues")
            case "$prev" in
                --tiered-store-path|-T|--store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --metadata|--broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --cluster-name|--broker-name|--topic|-t) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--tiered-store-path -T --metadata --store -s --broker-conf -c --cluster-name --broker-name --topic -t --json --quiet -Q --help" ;;
        "tiered rebuild-metadata")
            case "$prev" in
                --out|-o|--from) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --tiered-store-path|-T) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-name|--cluster-name) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--out -o --tiered-store-path -T --broker-name --cluster-name --from --json --quiet -Q --help" ;;
        "tiered reindex")
            case "$prev" in
                --tiered-store-path|-T|--store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --metadata|--broker-conf|-c|--out|-o) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --cluster-name|--broker-name|--conf|--hash-slots|--max-index|--commitlog-file-size) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
                --master) _rmqtool_words "local[*] inline"; return ;;
            esac
            _rmqtool_words "--tiered-store-path -T --metadata --store -s --broker-conf -c --cluster-name --broker-name --out -o --master --conf --dry-run --replace --json --quiet -Q --hash-slots --max-index --commitlog-file-size --new-geometry --help" ;;
        "tiered segments")
            case "$prev" in
                --topic|-t|--queue-id|-q|--cluster-name|--broker-name) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
                --tiered-store-path|-T|--store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --metadata|--broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            _rmqtool_words "--topic -t --queue-id -q --tiered-store-path -T --metadata --store -s --broker-conf -c --cluster-name --broker-name --json --quiet -Q --help" ;;
        "tiered verify")
            case "$prev" in
                --tiered-store-path|-T|--store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --metadata|--broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --cluster-name|--broker-name|--topic|-t|--workers) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--tiered-store-path -T --metadata --store -s --broker-conf -c --cluster-name --broker-name --topic -t --json --quiet -Q --workers --help" ;;
        "timer")
            _rmqtool_words "inspect list verify --help" ;;
        "timer inspect")
            case "$prev" in
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --json --quiet -Q --help" ;;
        "timer list")
            case "$prev" in
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --topic|-t|--due-after|--due-before) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --topic -t --due-after --due-before --json --quiet -Q --help" ;;
        "timer verify")
            case "$prev" in
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --now|--workers) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --now --no-check-crc --json --quiet -Q --workers --help" ;;
        "verify-cq")
            case "$prev" in
                --store|-s) mapfile -t COMPREPLY < <(compgen -d -- "$cur"); return ;;
                --broker-conf|-c) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
                --topic|-t|--source) COMPREPLY=(); compopt +o default 2>/dev/null; return ;;
            esac
            _rmqtool_words "--store -s --broker-conf -c --topic -t --source --compare --no-check-crc --json --quiet -Q --help" ;;
    esac
}
complete -o default -F _rmqtool rmqtool
