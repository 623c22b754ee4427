//! A service put back as its record had it: enabled and running as then, started again
//! (restarted when it runs) so that it reads the files put back before it; one envc made
//! since is stopped and disabled.

use super::remote::{apply_service, remove_service, ServiceSpec};
use super::Service;
use crate::error::StepError;
use crate::node_type::{BoxFuture, Restore, Restores};
use crate::store::Store;
use crate::transport::Transport;

impl Restores for Service {
    fn restore_rank(&self) -> u8 {
        2
    }

    fn failure_rolls_back(&self) -> bool {
        true
    }

    fn follows_inputs(&self) -> bool {
        true
    }

    fn restore<'a>(
        &'a self,
        t: &'a Transport,
        _store: &'a Store,
        items: &'a [&'a Restore],
    ) -> BoxFuture<'a, Vec<Result<String, StepError>>> {
        Box::pin(async move {
            let mut results = Vec::with_capacity(items.len());
            for item in items {
                results.push(restore_service(t, item).await);
            }
            results
        })
    }
}

async fn restore_service(t: &Transport, item: &Restore) -> Result<String, StepError> {
    match &item.to {
        Some(r) => {
            let flag = |k: &str| r.attrs.get(k).is_none_or(|v| v == "true");
            let spec = ServiceSpec {
                name: item.name.clone(),
                enabled: flag("enabled"),
                running: flag("running"),
                restart: flag("running"),
            };
            apply_service(t, &spec).await.map(|_| {
                if spec.running {
                    "restarted".to_string()
                } else {
                    "stopped".to_string()
                }
            })
        }
        None => remove_service(t, &item.name)
            .await
            .map(|()| "stopped and disabled (it did not exist before)".to_string()),
    }
}
