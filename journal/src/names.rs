//! What a journal's files are called on disk: the name a reader lists, and the names a file goes by until it is
//! whole (a listing skips those, and a writer that opens a journal removes what a killed writer left).

/// Extension of archive segment files.
pub const SEGMENT_EXT: &str = "tbj";

/// Extension of the temporary name a file is made under before it is renamed into place (`0000000003.creating`
/// beside `0000000003.tbj`).
pub(crate) const CREATING_EXT: &str = "creating";

/// Extension of the temporary name a compressed file is written under before it replaces the plain one.
pub(crate) const COMPRESSING_EXT: &str = "compressing";
