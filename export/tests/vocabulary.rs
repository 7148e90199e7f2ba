//! The book's table of the export vocabulary (`docs/book/src/export.md`, between the `vocabulary` anchors) is
//! exactly what the code writes: every kind's columns, in order, with their types and meanings.

use tickbox_export::{fields_of, FieldDef, FieldType, RecordKind, COMMON};

/// The table as the book must hold it.
fn table() -> String {
    let mut t = String::from(
        "| kind | column | Parquet type | JSON / CSV | meaning |\n|---|---|---|---|---|\n",
    );
    for def in &COMMON {
        t.push_str(&row("every kind", def));
    }
    for kind in RecordKind::ALL {
        for def in fields_of(kind) {
            t.push_str(&row(kind.name(), def));
        }
    }
    t
}

fn row(kind: &str, def: &FieldDef) -> String {
    let (name, parquet, text) = match def.ty {
        FieldType::Time => (
            format!("`{}`", def.name),
            "Timestamp(ns, UTC)",
            "RFC 3339, 9 fraction digits",
        ),
        FieldType::OptTime => (
            format!("`{}`", def.name),
            "Timestamp(ns, UTC), null when unknown",
            "RFC 3339; `null` / empty",
        ),
        FieldType::U8 => (format!("`{}`", def.name), "UInt8", "number"),
        FieldType::U16 => (format!("`{}`", def.name), "UInt16", "number"),
        FieldType::U32 => (format!("`{}`", def.name), "UInt32", "number"),
        FieldType::U64 => (format!("`{}`", def.name), "UInt64", "number"),
        FieldType::Price => (
            format!("`{0}_e9` (`--price float`: `{0}`)", def.name),
            "Int64 (Float64)",
            "integer (float)",
        ),
        FieldType::Str => (format!("`{}`", def.name), "Utf8", "string"),
        FieldType::Bytes => (format!("`{}`", def.name), "Binary", "lower-case hex"),
    };
    format!("| {kind} | {name} | {parquet} | {text} | {} |\n", def.doc)
}

#[test]
fn the_books_vocabulary_table_is_the_codes() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/book/src/export.md");
    let book = std::fs::read_to_string(path).unwrap();
    let open = "<!-- ANCHOR: vocabulary -->\n";
    let start = book.find(open).expect("vocabulary anchor") + open.len();
    let end = book
        .find("<!-- ANCHOR_END: vocabulary -->")
        .expect("vocabulary end anchor");
    let want = table();
    assert!(
        book[start..end] == want,
        "docs/book/src/export.md's vocabulary table differs from the code; it should read:\n\n{want}"
    );
}
