# bash completion for rmqtool (static; regenerate with scripts/regen.py)
_rmqtool() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" cmd="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in -*) ;; *) cmd="${COMP_WORDS[i]}"; break ;; esac
    done
    case "$prev" in
        --store|-s|--tiered-dir|--out) COMPREPLY=($(compgen -d -- "$cur")); return ;;
        --broker-conf|-c|--body-file|--from-jsonl) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    esac
    case "$cmd" in
        "") COMPREPLY=($(compgen -W "clean consumers delays demo doctor dump-commitlog dump-cq get inspect-index print-msg put query-key queues recover repair spark-reindex tiered timer --version -V --debug --install-completion --show-completion --help" -- "$cur")) ;;
        clean) COMPREPLY=($(compgen -W "--store -s --broker-conf -c --reserved-hours --dry-run --force-now --keep-timer-messages --json --hash-slots --max-index --commitlog-file-size --cq-file-size --help" -- "$cur")) ;;
        consumers) COMPREPLY=($(compgen -W "--store -s --broker-conf -c --group -g --json --help" -- "$cur")) ;;
        delays) COMPREPLY=($(compgen -W "--store -s --broker-conf -c --json --help" -- "$cur")) ;;
        demo) COMPREPLY=($(compgen -W "--messages -n --master --help" -- "$cur")) ;;
        doctor) COMPREPLY=($(compgen -W "--store -s --broker-conf -c --deep --now --json --quiet -Q --hash-slots --max-index --commitlog-file-size --cq-file-size --help" -- "$cur")) ;;
        dump-commitlog) COMPREPLY=($(compgen -W "--store -s --broker-conf -c --topic -t --begin -b --end -e --from-offset --to-offset --files --count -n --body --body-dir --max-message-size --no-check-crc --json --commitlog-file-size --help" -- "$cur")) ;;
        dump-cq) COMPREPLY=($(compgen -W "--topic -t --queue-id -q --store -s --broker-conf -c --queue-offset -i --count -n --no-check-crc --json --help" -- "$cur")) ;;
        get) COMPREPLY=($(compgen -W "--store -s --broker-conf -c --offset -o --msg-id -m --from-file -f --topic -t --queue-id -q --queue-offset -i --count -n --json --commitlog-file-size --hash-slots --max-index --help" -- "$cur")) ;;
        inspect-index) COMPREPLY=($(compgen -W "--store -s --broker-conf -c --walk-slot --walk-key --max -n --stats --verify --json --hash-slots --max-index --commitlog-file-size --help" -- "$cur")) ;;
        print-msg) COMPREPLY=($(compgen -W "--topic -t --begin -b --end -e --store -s --broker-conf -c --queue-id -q --tags --max -n --no-check-crc --json --help" -- "$cur")) ;;
        put) COMPREPLY=($(compgen -W "--store -s --broker-conf -c --topic -t --tags --keys -k --body --body-file --queue-id -q --property -p --store-timestamp --from-jsonl --sync-flush --json --quiet -Q --hash-slots --max-index --commitlog-file-size --cq-file-size --create --help" -- "$cur")) ;;
        query-key) COMPREPLY=($(compgen -W "--topic -t --key -k --store -s --broker-conf -c --begin -b --end -e --max -n --unique-key --raw --explain --json --hash-slots --max-index --commitlog-file-size --help" -- "$cur")) ;;
        queues) COMPREPLY=($(compgen -W "--store -s --broker-conf -c --topic -t --json --help" -- "$cur")) ;;
        recover) COMPREPLY=($(compgen -W "--store -s --broker-conf -c --dry-run --no-check-crc --index-safe --full-scan --force --json --hash-slots --max-index --commitlog-file-size --cq-file-size --help" -- "$cur")) ;;
        repair) COMPREPLY=($(compgen -W "--help" -- "$cur")) ;;
        spark-reindex) COMPREPLY=($(compgen -W "--store -s --broker-conf -c --out -o --master --conf --dry-run --replace --json --hash-slots --max-index --commitlog-file-size --new-geometry --help" -- "$cur")) ;;
        tiered) COMPREPLY=($(compgen -W "--help" -- "$cur")) ;;
        timer) COMPREPLY=($(compgen -W "--help" -- "$cur")) ;;
    esac
}
complete -o default -F _rmqtool rmqtool
