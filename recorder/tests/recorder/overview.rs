//! What a replay reads of a journal to plan a selection: its ends, not a sample of its topics (which a window of a
//! long history in an object store would otherwise fetch), until a message has to say what the journal holds.

use tickbox_journal::{Writer, WriterOptions};
use tickbox_recorder::{JournalOverview, Recorder};

const T0: u64 = 1_767_000_000_000_000_000;

/// A ring journal of `n` quotes over two topic prefixes, origin times `T0 + i` µs.
fn journal(dir: &std::path::Path, n: u64) -> std::path::PathBuf {
    let path = dir.join("j.tbj");
    let mut w = Writer::open(&path, &WriterOptions::ring(8 << 20)).unwrap();
    let mut rec = Recorder::new(&mut w).unwrap();
    {
        let mut batch = w.batch();
        for i in 0..n {
            let topic = if i % 2 == 0 { "Q.XNAS.A" } else { "T.XNAS.B" };
            let frame = tickbox_testkit::quote(topic, 1, i + 1)
                .sent_at(T0 + i * 1_000)
                .frame();
            rec.on_message(&mut batch, T0 + i * 1_000, &frame).unwrap();
        }
        batch.commit().unwrap();
    }
    rec.after_commit(&mut w).unwrap();
    path
}

#[test]
fn planning_reads_the_ends_and_the_topics_are_sampled_only_to_say_what_the_journal_holds() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal(dir.path(), 5_000);
    let ends = JournalOverview::ends(&path).unwrap();
    let full = JournalOverview::scan(&path).unwrap();
    assert_eq!(ends.records, full.records);
    assert_eq!(ends.first_origin_ns, Some(T0));
    assert_eq!(ends.first_origin_ns, full.first_origin_ns);
    assert_eq!(ends.last_origin_ns, full.last_origin_ns);
    assert_eq!(ends.sampled, 0, "no topic sampled for a plan");
    assert!(ends.prefixes.is_empty());
    assert_eq!(full.sampled, 5_000);
    assert_eq!(full.prefixes.get("Q."), Some(&2_500));
    let utc = tickbox_recorder::parse_zone("UTC").unwrap();
    assert!(!ends.describe(&utc).contains("topic prefixes"));
    assert!(full.describe(&utc).contains("Q. (2500), T. (2500)"));
}
