//! The log a `--db` names, opened through its binding: the SQLite file ([`super::store`]) or
//! PostgreSQL ([`super::pg`]). Apart from the trait ([`super::backend`]) so that neither binding
//! imports the other nor the file that chooses between them.

use super::backend::{Access, DbTarget, TaskStore};
use super::pg::PgStore;
use super::store::Store;
use crate::task::error::TaskResult;

/// Opens the log. Errors name the file or the URL (its password hidden). The fault hooks are
/// armed (or refused) here, from the database's mark ([`super::faults`]).
pub fn open(db: &DbTarget, access: Access) -> TaskResult<Box<dyn TaskStore>> {
    Ok(match db {
        DbTarget::Sqlite(p) => Box::new(Store::open(p, access)?),
        DbTarget::Postgres(url) => Box::new(PgStore::open(url, access != Access::Read)?),
    })
}
