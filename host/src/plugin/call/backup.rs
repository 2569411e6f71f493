//! `backup.schedule`: a slot and its Job, slots to expire, checked as DNS-label-safe.

use super::*;

impl CompiledPlugin {
    /// Calls `backup.schedule`.
    pub fn call_backup(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
        cx: &AppContext,
        last_completed_slot: Option<&str>,
    ) -> Result<BackupDecision, CallError> {
        let capability = Capability::Backup;
        let input = guest::backup::ScheduleInput {
            app: &cx.app,
            observed: &cx.observed_texts(),
            last_completed_slot,
            now: cx.now_ms,
        };
        let result = self.invoke(
            engine,
            limits,
            tags,
            cx.now_ms,
            capability,
            &self.exports.backup,
            |g, store, instance| {
                g.load(&mut *store, instance)?
                    .call_schedule(&mut *store, input)
            },
        )?;
        let decision = result.map_err(|err| refused!(backup, self.label(), capability, err))?;
        if decision.expire.len() > MAX_LISTED {
            return Err(self.bad(
                capability,
                format!(
                    "{} slots to expire; at most {MAX_LISTED} per call",
                    decision.expire.len()
                ),
            ));
        }
        for slot in decision
            .expire
            .iter()
            .chain(decision.run.as_ref().map(|r| &r.slot))
        {
            if !is_slot(slot) {
                return Err(self.bad(
                    capability,
                    format!("slot {slot:?} must be 1 to 40 lower-case letters, digits and '-'"),
                ));
            }
        }
        let run = match decision.run {
            Some(run) => {
                let mut job =
                    self.parse_objects(capability, limits, std::slice::from_ref(&run.job))?;
                job.pop().map(|job| (run.slot, job))
            }
            None => None,
        };
        Ok(BackupDecision {
            run,
            expire: decision.expire,
            requeue_after: decision.requeue_after.map(Duration::from_millis),
        })
    }
}
