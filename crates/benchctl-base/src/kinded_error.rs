//! The error shape every benchctl crate shares: a kind (the crate's own `ErrorKind`, which
//! callers match on and the runner maps to an exit code), a lowercase message that reads
//! after "failed to …", and the failure underneath, kept whole for
//! [`std::error::Error::source`]. Each crate declares the struct itself, derived with
//! `thiserror` (a derive cannot be expanded from another crate's `macro_rules!`), and
//! [`kinded_error_impl!`](crate::kinded_error_impl) writes the rest once for all of them:
//!
//! ```ignore
//! #[derive(Debug, thiserror::Error)]
//! #[error("{message}")]
//! pub struct Error {
//!     kind: ErrorKind,
//!     message: String,
//!     #[source]
//!     source: Option<Box<dyn std::error::Error + Send + Sync>>,
//! }
//! benchctl_base::kinded_error_impl!(Error, ErrorKind);
//! ```

/// For a `struct $error { kind, message, source }` as above: the constructors `new` and
/// `caused_by`, `kind()`, equality by kind and message (causes are not compared), and
/// `pub type Result<T>`.
#[macro_export]
macro_rules! kinded_error_impl {
    ($error:ident, $kind:ty) => {
        /// Errors are equal when they say the same thing (their causes are not compared).
        impl PartialEq for $error {
            fn eq(&self, other: &Self) -> bool {
                self.kind == other.kind && self.message == other.message
            }
        }

        impl Eq for $error {}

        impl $error {
            pub fn new(kind: $kind, message: impl Into<String>) -> Self {
                Self { kind, message: message.into(), source: None }
            }

            /// An error caused by `source`.
            pub fn caused_by(
                kind: $kind,
                message: impl Into<String>,
                source: impl std::error::Error + Send + Sync + 'static,
            ) -> Self {
                Self { kind, message: message.into(), source: Some(Box::new(source)) }
            }

            pub fn kind(&self) -> $kind {
                self.kind
            }
        }

        pub type Result<T> = std::result::Result<T, $error>;
    };
}
