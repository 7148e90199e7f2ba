//! `tickbox coord ls`: each child of a path with the recipe it holds, if any, beside it.

use crate::inspect::{inspect, RecipeState};
use crate::{Coord, Result};

impl RecipeState {
    /// `RECIPE<TAB>details`: its state line without the path column.
    pub fn details(&self) -> String {
        let line = self.line();
        match line.split_once('\t') {
            Some((_, rest)) => rest.to_owned(),
            None => line,
        }
    }
}

/// The state of the recipe at `path` itself, if it is one (not of the recipes below it).
pub fn recipe_at(coord: &Coord, path: &str) -> Result<Option<RecipeState>> {
    Ok(inspect(coord, path)?
        .into_iter()
        .find(|s| s.to_json()["path"] == path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_leave_out_the_path_column() {
        let free = RecipeState::Lock {
            path: "/locks/a".into(),
            holder: None,
            waiting: 0,
        };
        assert_eq!(free.line(), "/locks/a\tlock\tfree");
        assert_eq!(free.details(), "lock\tfree");
    }
}
