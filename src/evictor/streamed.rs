//! The evict step of a sweep with a stream: every stale key goes through the stream script,
//! which removes, appends and publishes in one atomic step; here its reply is counted.

use presence_sweeper_config as config;
use presence_sweeper_redis::evict::KeyReply;
use presence_sweeper_redis::evict::stream::{StreamKey, StreamParams, Streamed};
use presence_sweeper_redis::{Error, Node, refusal_reason};
use presence_sweeper_rules::check::{CheckOpts, Checked};
use presence_sweeper_rules::event::conversation_field;
use presence_sweeper_rules::plan::KeyState;
use presence_sweeper_webhooks::keys;

use super::Evictor;
use super::apply::slot_groups;
use super::check::CheckCtx;

/// About the most bytes of ids one call of the stream script encodes.
const STREAM_CALL_BYTES: usize = 128 << 10;

impl Evictor {
    /// Evicts the keys of `groups` (indices into `keys`; each group at most a budget of
    /// zombies) and the `big` ones, calling the script again for keys its budget did not
    /// finish. A big key's first call asks for `first` members and each next one twice as many.
    #[expect(
        clippy::too_many_arguments,
        reason = "the steps' shared state, passed as it is"
    )]
    pub(super) async fn sweep_streams(
        &self,
        node: &mut Node,
        keys: &[&[u8]],
        groups: Vec<Vec<usize>>,
        big: Vec<usize>,
        first: usize,
        opts: CheckOpts,
        ctx: CheckCtx<'_>,
        out: &mut Checked<Error>,
    ) -> Result<(), Error> {
        let most = self.stream_budget();
        let runs = groups
            .into_iter()
            .map(|g| (g, most))
            .chain((!big.is_empty()).then_some((big, first.clamp(1, most))));
        for (group, budget) in runs {
            for group in slot_groups(keys, &group, node.needs_slot_groups()) {
                self.stream_group(node, keys, group, budget, opts, ctx, out)
                    .await?;
            }
        }
        Ok(())
    }

    /// The calls for one group of keys that may share a call.
    #[expect(
        clippy::too_many_arguments,
        reason = "the steps' shared state, passed as it is"
    )]
    async fn stream_group(
        &self,
        node: &mut Node,
        keys: &[&[u8]],
        mut pending: Vec<usize>,
        budget: usize,
        opts: CheckOpts,
        ctx: CheckCtx<'_>,
        out: &mut Checked<Error>,
    ) -> Result<(), Error> {
        let stream = self.config.stream.as_ref().expect("a sweep with a stream");
        let most = self.stream_budget();
        let [head, roster, count, truncated] = self.encoder.parts();
        // On a cluster the call's keys share a slot, and so must the due sets it marks.
        let in_slot = node
            .needs_slot_groups()
            .then(|| pending.first().map(|&i| keys::slot_of(keys[i])))
            .flatten();
        let due = keys::due_keys_arg(&stream.webhooks, in_slot);
        let mut params = StreamParams {
            ttl: self.config.ttl,
            unit: self.config.score_unit,
            budget,
            roster: self.sizing.roster(),
            judge_by: Some(opts.judge_at),
            maxlen: stream.maxlen,
            retention: stream.retention,
            stream_ttl: stream.effective_ttl(),
            shape: self.config.event_shape,
            max_bytes: self.max_bytes,
            publish: self.publish_command(),
            parts: [head, roster, count, truncated],
            oldest: opts.purpose.tracks(),
            due: &due,
        };
        // On shutdown no new call starts; what the calls before removed was counted.
        while !pending.is_empty() && !ctx.cancel.is_cancelled() {
            let call: Vec<StreamKey<'_>> =
                pending.iter().map(|&i| self.stream_key(keys[i])).collect();
            let reply = self.stream_script().call(node, &call, &params).await?;
            params.budget = (params.budget * 2).min(most);
            ctx.observer.progress();
            let mut next = Vec::new();
            let mut refused = None;
            let appended = reply
                .keys
                .iter()
                .any(|r| matches!(r, KeyReply::Swept(s) if !s.removed.is_empty()));
            if let (Some(in_slot), Some(hints), true) = (in_slot, &self.due_slots, appended) {
                hints.mark(&stream.webhooks, in_slot);
            }
            for (i, result) in pending.into_iter().zip(reply.keys) {
                let swept = match result {
                    KeyReply::Swept(s) => s,
                    KeyReply::NotReached => {
                        next.push(i);
                        continue;
                    }
                    KeyReply::WrongType => {
                        out.states[i] = KeyState::Gone;
                        continue;
                    }
                };
                self.count_streamed(keys[i], &swept, reply.now, ctx, out);
                if let Some(e) = swept.refused {
                    refused.get_or_insert(e);
                } else if swept.more {
                    next.push(i);
                } else {
                    out.states[i] = self.live(swept.card, swept.oldest);
                }
            }
            if let Some(e) = refused {
                return Err(stream_refused(stream, &e));
            }
            pending = next;
        }
        Ok(())
    }

    /// Most members one call of the stream script may remove: the script encodes their ids
    /// itself, at Lua's pace for ids that are not plain text, so calls of long ids stay
    /// smaller than transactions' ([`STREAM_CALL_BYTES`] of ids).
    fn stream_budget(&self) -> usize {
        self.sizing
            .budget_within(STREAM_CALL_BYTES, self.evict.max_members_per_call)
    }

    /// The names that go with `key` in a call.
    fn stream_key<'k>(&self, key: &'k [u8]) -> StreamKey<'k> {
        let stream = self.config.stream.as_ref().expect("a sweep with a stream");
        let conversation_id = self.config.pattern.conversation_id(key).unwrap_or(key);
        StreamKey {
            key,
            stream: stream.key.render(key, conversation_id),
            conversation: conversation_field(conversation_id),
            channel: self.config.channel.render(key, conversation_id),
        }
    }

    /// Counts what one call did to `key` (the key itself once it is finished), as an
    /// announcement without a stream does.
    fn count_streamed(
        &self,
        key: &[u8],
        s: &Streamed,
        now: f64,
        ctx: CheckCtx<'_>,
        out: &mut Checked<Error>,
    ) {
        if !s.more || s.refused.is_some() {
            out.counts.keys += 1;
            out.counts.members += s.card;
            ctx.observer.key_checked(s.card);
        }
        out.counts.evicted += s.removed.len() as u64;
        out.counts.events_published += s.published;
        out.counts.events_failed += s.unpublished;
        ctx.observer.published(s.published);
        if s.unpublished > 0 {
            ctx.observer.events_failed(s.unpublished);
            tracing::error!(
                sweep = %self.config.name,
                events = s.unpublished,
                "members were evicted and their events appended to the stream, but Redis refused to publish them"
            );
        }
        let ids = s.removed.iter().map(|(m, _)| m.len());
        self.sizing.observe(
            s.removed.len(),
            ids.clone().sum::<usize>(),
            ids.max().unwrap_or(0),
        );
        let conversation_id = self.config.pattern.conversation_id(key).unwrap_or(key);
        for (member, score) in &s.removed {
            self.evicted(ctx, conversation_id, member, *score, now);
        }
    }
}

/// The error of a stream that refused a write (`OOM` under `maxmemory`, an ACL, a key of
/// another type): nothing was removed from that key without its entry.
fn stream_refused(stream: &config::Stream, error: &str) -> Error {
    let (code, detail) = error.split_once(' ').unwrap_or((error, ""));
    if code == "NOPERM" {
        return Error::Permission {
            command: "XREVRANGE, XADD or XTRIM".into(),
            target: format!("the stream {}", stream.key),
            detail: refusal_reason(detail),
        };
    }
    Error::Redis(redis::make_extension_error(
        code.to_owned(),
        Some(format!(
            "{detail} (the stream {} refused an append: no member was removed without its entry)",
            stream.key
        )),
    ))
}
