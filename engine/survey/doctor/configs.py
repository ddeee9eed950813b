"""The doctor's checks of config/*.json: each file and its .bak as the broker's ConfigManager.load reads them
(format §1.2; BrokerController.initialize loads the broker's managers, DefaultMessageStore and the timer store
their own). Established with a real 5.3.x broker (docs/doctor.md): a torn file whose .bak is empty is deleted and
the broker starts with an empty table without a word; a torn file whose .bak is torn too stops the start."""
from __future__ import annotations

from engine.broker.config.jsonfiles import (BAK_SUFFIX, CONFIG_FILES, CONSUMER_OFFSET, SUBSCRIPTION_GROUP, TOPICS,
                                            config_file_state)
from engine.broker.layout import StoreLayout
from engine.ops.repair import FROM_STORE
from engine.survey.doctor.report import ERROR, INFO, WARNING, DoctorReport, Finding, Fixes


#: What a rebuild from the store cannot give back, said in the finding (docs/doctor.md "config/*.json").
REBUILD_LIMITS = {
    SUBSCRIPTION_GROUP: "; the groups the store names are rebuilt with default settings (an admin's changes to a "
                        "group, and groups the store never names, are not: with autoCreateSubscriptionGroup=false "
                        "the broker refuses their consumers until they are created again)",
}
#: What the broker then does with the empty table, where it matters (ScheduleMessageService.start,
#: SubscriptionGroupManager.findSubscriptionGroupConfig).
AFTER_LOSS = {
    "delayOffset.json": ": every delay level starts at its queue's first unit, so the delayed messages already "
                        "delivered are delivered again (duplicates)",
    SUBSCRIPTION_GROUP: ": only its own groups are left; other groups are created again with default settings "
                        "as their consumers come (autoCreateSubscriptionGroup), or refused when that is false",
}
#: Files the store cannot rebuild: what the broker does without them and what an operator can do.
MANUAL_STEPS = {
    CONSUMER_OFFSET: "consumer offsets are not in the store: without them each group starts where its clients' "
                     "consumeFromWhere says (CONSUME_FROM_LAST_OFFSET by default: the backlog is skipped; a queue "
                     "still starting at offset 0 is read again from its start); after accepting the empty table, "
                     "`mqadmin resetOffsetByTime -g GROUP -t TOPIC -s TIME` puts a group back where it was",
}


def _generic(v):
    return v


#: The tables a broker keeps in RocksDB instead of config/*.json (storeType=defaultRocksDB or
#: configManagerVersion=v2: engine.broker.config.rocksdb).
ROCKSDB_TABLES = (TOPICS, SUBSCRIPTION_GROUP, CONSUMER_OFFSET)


def check_configs(layout: StoreLayout, fix: Fixes, rep: DoctorReport, json_tables: bool = True) -> None:
    """json_tables=False: the topics, groups and offsets are in RocksDB, so their JSON files are not the broker's."""
    has_queues = layout.consumequeue_dir.is_dir() and any(layout.consumequeue_dir.iterdir())
    for name, decode, holds, vital, loader in CONFIG_FILES:
        if not json_tables and name in ROCKSDB_TABLES:
            continue
        st = config_file_state(layout, name, decode or _generic)
        rel = f"config/{name}"
        main, bak = st.main_problem, st.bak_problem
        absent = ("is missing", "is empty")
        rebuild = fix("repair", "config", name, "--from-store") if name in FROM_STORE else None
        manual = (f"restore {rel} from a backup if there is one; otherwise `{fix('repair', 'config', name, '--empty')}`"
                  " accepts the empty table the broker would start with"
                  + (f" ({MANUAL_STEPS[name]})" if name in MANUAL_STEPS else ""))
        person = f"; only a person can decide: {manual}" if rebuild is None else REBUILD_LIMITS.get(name, "")
        if main is None:
            if bak is not None and bak not in absent:
                rep.findings.append(Finding(
                    "config-bak-damaged", INFO, rel + BAK_SUFFIX, None, f"{rel}{BAK_SUFFIX} {bak}",
                    f"reads {rel} ({loader}); its next save replaces the .bak", None))
            continue
        if bak is None:
            rep.findings.append(Finding(
                "config-from-bak", WARNING, rel, None,
                f"{rel} {main}; {name}{BAK_SUFFIX} is readable (the save before the last)",
                f"deletes {rel} and loads {name}{BAK_SUFFIX} ({loader}): changes of the last save are lost",
                fix("repair", "config", name, "--from-bak")))
        elif st.start_fails:
            rep.findings.append(Finding(
                "config-unloadable", ERROR, rel, None,
                f"{rel} {main} and {name}{BAK_SUFFIX} {bak}"
                + person,
                f"deletes {rel}, fails to load {name}{BAK_SUFFIX} ({loader} returns false) and does not start",
                rebuild))
        elif main in absent and bak in absent:
            if name == TOPICS and has_queues:
                rep.findings.append(Finding(
                    "config-missing", WARNING, rel, None,
                    f"{rel} and its .bak {'are missing' if main == bak == 'is missing' else 'hold nothing'} but "
                    "the store has consume queues",
                    "starts with no topic configs: topics are created again on first use with default queue counts "
                    "(autoCreateTopicEnable) or not at all", rebuild))
        else:
            rep.findings.append(Finding(
                "config-lost", ERROR if vital else WARNING, rel, None,
                f"{rel} {main} and {name}{BAK_SUFFIX} {bak}: no readable copy of the {holds}" + person,
                f"deletes {rel} and starts with no {holds}, without a word in its log beyond the parse error"
                + AFTER_LOSS.get(name, ""), rebuild))
