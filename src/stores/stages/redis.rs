//! Stage instances in Redis (`[cluster] redis`): one JSON value per workspace (its state and
//! whole history) under `stage:<workflow>:<workspace>`, and the index `stages` of the
//! workspaces that moved. A move is a compare-and-set on the exact value read, so of two
//! replicas moving one workspace at once, one wins and the other is told the stage moved.

use crate::stores::StoreError;
use std::sync::LazyLock;

use redis::AsyncCommands;

use super::{Instance, Listed, MAX_LISTED, Move, StageStore};
use crate::stores::redis::Redis;

static CAS: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local cur = redis.call('GET', KEYS[1])
if (ARGV[1] == '' and cur == false) or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('SADD', KEYS[2], ARGV[3])
  return 1
end
return 0
",
    )
});

#[derive(Debug, Clone)]
pub struct RedisStages(pub Redis);

fn down(_: crate::stores::redis::StoreDown) -> StoreError {
    StoreError::Down("stage")
}

impl RedisStages {
    fn key(&self, workflow: &str, workspace: &str) -> String {
        self.0.key(&["stage", workflow, workspace])
    }

    async fn raw(&self, workflow: &str, workspace: &str) -> Result<Option<String>, StoreError> {
        let key = self.key(workflow, workspace);
        self.0
            .run("stage_get", |mut c| async move { c.get(&key).await })
            .await
            .map_err(down)
    }
}

fn parse(raw: &str) -> Result<Instance, StoreError> {
    serde_json::from_str(raw).map_err(|e| StoreError::Unreadable("stage", e.to_string()))
}

#[async_trait::async_trait]
impl StageStore for RedisStages {
    async fn get(&self, workflow: &str, workspace: &str) -> Result<Option<Instance>, StoreError> {
        self.raw(workflow, workspace)
            .await?
            .map(|r| parse(&r))
            .transpose()
    }

    async fn advance(
        &self,
        workflow: &str,
        workspace: &str,
        initial: &str,
        m: &Move,
    ) -> Result<bool, StoreError> {
        let old = self.raw(workflow, workspace).await?;
        let mut instance = match &old {
            Some(r) => parse(r)?,
            None => Instance {
                state: initial.to_owned(),
                history: Vec::new(),
            },
        };
        if instance.state != m.from {
            return Ok(false);
        }
        instance.state = m.to.clone();
        instance.history.push(m.clone());
        let new = serde_json::to_string(&instance)
            .map_err(|e| StoreError::Unreadable("stage", e.to_string()))?;
        let member = serde_json::to_string(&[workflow, workspace])
            .map_err(|e| StoreError::Unreadable("stage", e.to_string()))?;
        let (key, index) = (self.key(workflow, workspace), self.0.key(&["stages"]));
        let expected = old.unwrap_or_default();
        let written: i64 = self
            .0
            .run("stage_move", |mut c| async move {
                CAS.key(&key)
                    .key(&index)
                    .arg(expected)
                    .arg(new)
                    .arg(member)
                    .invoke_async(&mut c)
                    .await
            })
            .await
            .map_err(down)?;
        Ok(written == 1)
    }

    async fn list(&self) -> Result<Vec<Listed>, StoreError> {
        let index = self.0.key(&["stages"]);
        let mut members: Vec<String> = self
            .0
            .run(
                "stage_list",
                |mut c| async move { c.smembers(&index).await },
            )
            .await
            .map_err(down)?;
        members.sort();
        members.truncate(MAX_LISTED);
        let mut out = Vec::with_capacity(members.len());
        for m in members {
            let Ok([workflow, workspace]) = serde_json::from_str::<[String; 2]>(&m) else {
                continue;
            };
            if let Some(instance) = self.get(&workflow, &workspace).await? {
                out.push(Listed {
                    workflow,
                    workspace,
                    instance,
                });
            }
        }
        Ok(out)
    }
}
