//! A future that is boxed to be returned from a trait object's method (a node kind's, a
//! provider's), run on whatever task the engine chooses.

use std::future::Future;
use std::pin::Pin;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
