//! The rules of `standing`, on instants the tests choose.
use super::*;
use crate::primary::canary::WriteRefusal;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A probe's answer at Redis time `time`, with the canary at `count` and `run_id`.
fn probe(time: f64, count: Option<u64>, run_id: &str) -> Result<Evidence, ()> {
    Ok(Evidence {
        time,
        canary: count.map_or(Reading::Unknown, Reading::Count),
        run_id: (!run_id.is_empty()).then(|| run_id.to_owned()),
    })
}

/// A loop that has had one reply, at Redis time 1000 s.
fn answered(t0: Instant) -> Standing {
    let mut l = Standing::new(t0, None);
    assert_eq!(l.poll(t0), Some(Request::Probe));
    assert_eq!(l.on_probe(t0, probe(1000.0, Some(7), "a")), Seen::default());
    l
}

#[test]
fn the_first_reply_is_no_outage() {
    let t0 = crate::testing::now();
    let l = answered(t0);
    assert_eq!(l.credit(), None);
    assert_eq!(l.judge_at(t0), Some(1000.0));
}

#[test]
fn an_outage_is_declared_only_after_stall_without_replies() {
    let t0 = crate::testing::now();
    let mut l = answered(t0);
    assert_eq!(
        l.on_reply(None, t0 + STALL, Some(1001.5)).outage,
        None,
        "a gap of exactly STALL"
    );
    let back = t0 + STALL + STALL + ms(1);
    let outage = l
        .on_reply(None, back, Some(1003.001))
        .outage
        .expect("an outage");
    assert_eq!(outage.from, 1001.5);
    assert!((outage.seconds - 1.501).abs() < 1e-9);
}

#[test]
fn credit_is_granted_when_redis_returns_and_lasts_a_ttl() {
    let t0 = crate::testing::now();
    let mut l = answered(t0);
    let back = t0 + Duration::from_secs(10);
    l.on_reply(None, back, Some(1010.0))
        .outage
        .expect("an outage");
    assert_eq!(
        l.credit(),
        Some(Credit {
            from: 1000.0,
            to: 1010.0
        })
    );
    // Within the credit every member is spared until a ttl after Redis answered again,
    // whenever its window closed; staleness is judged at Redis's now.
    let within = back + Duration::from_secs(5);
    assert_eq!(l.spare_until(within, 45.0), Some(1055.0));
    assert_eq!(l.judge_at(back), Some(1010.0));
    // After a ttl from its end, no more sparing.
    for s in 1..=46 {
        assert_eq!(
            l.on_reply(None, back + Duration::from_secs(s), None).outage,
            None
        );
    }
    let later = back + Duration::from_secs(46);
    assert_eq!(l.spare_until(later, 45.0), None);
    assert!((l.judge_at(later).unwrap() - 1056.0).abs() < 1e-6);
}

#[test]
fn two_close_outages_make_one_credit() {
    let t0 = crate::testing::now();
    let mut l = answered(t0);
    l.on_reply(None, t0 + Duration::from_secs(3), Some(1003.0));
    l.on_reply(None, t0 + Duration::from_secs(8), Some(1008.0));
    assert_eq!(
        l.credit(),
        Some(Credit {
            from: 1000.0,
            to: 1008.0
        })
    );
}

#[test]
fn staleness_is_not_judged_past_stall_after_the_last_reply() {
    let t0 = crate::testing::now();
    let l = answered(t0);
    let judge = l.judge_at(t0 + Duration::from_secs(10)).unwrap();
    assert_eq!(judge, 1000.0 + STALL.as_secs_f64());
    assert!(l.held_back(t0 + Duration::from_secs(10), judge));
    assert!(!l.held_back(t0 + ms(100), 1000.0));
}

/// An eviction answered late carries the `TIME` its check read before it: its arrival proves
/// Redis answers, but does not take the last answer's clock back, which would hold the
/// judging instant back behind Redis's clock until the next reply.
#[test]
fn a_late_reply_does_not_move_the_last_answer_back() {
    let t0 = crate::testing::now();
    let mut l = answered(t0);
    l.on_reply(None, t0 + ms(500), Some(1000.5));
    let late = t0 + ms(600);
    l.on_reply(Some(t0 + ms(100)), late, Some(1000.1));
    assert_eq!(l.last_reply(), Some((late, 1000.5)));
    let judge = l.judge_at(late).unwrap();
    assert!(!l.held_back(late, judge), "judged at {judge}");
}

#[test]
fn an_inherited_outage_ends_with_the_first_reply() {
    let t0 = crate::testing::now();
    let mut l = Standing::new(t0, Some(990.0));
    let outage = l
        .on_reply(None, t0, Some(1000.0))
        .outage
        .expect("the failover's outage");
    assert_eq!(
        outage,
        Outage {
            from: 990.0,
            seconds: 10.0
        }
    );
    assert_eq!(
        l.on_reply(None, t0 + ms(10), Some(1000.01)).outage,
        None,
        "ended once"
    );
}

#[test]
fn no_judging_before_redis_answered() {
    let t0 = crate::testing::now();
    let mut l = Standing::new(t0, None);
    assert_eq!(l.judge_at(t0), None);
    assert_eq!(
        l.on_reply(None, t0, None).outage,
        None,
        "no clock: nothing to record"
    );
    l.observe_time(Some(t0), t0, 1000.0);
    assert_eq!(l.judge_at(t0), None, "a clock, but no reply yet");
}

#[test]
fn probes_go_out_when_redis_is_quiet_one_at_a_time() {
    let t0 = crate::testing::now();
    let mut l = Standing::new(t0, None);
    assert_eq!(
        l.poll(t0),
        Some(Request::Probe),
        "never answered: ask at once"
    );
    assert_eq!(l.poll(t0), None, "one probe in flight");
    assert_eq!(
        l.on_probe(t0 + ms(1), probe(1000.0, None, "")),
        Seen::default()
    );
    assert_eq!(l.poll(t0 + ms(100)), None, "answered lately");
    assert_eq!(l.next_wake(), Some(t0 + ms(1) + PROBE_EVERY));
    assert_eq!(l.poll(t0 + ms(1) + PROBE_EVERY), Some(Request::Probe));
}

#[test]
fn other_replies_put_the_probe_off() {
    let t0 = crate::testing::now();
    let mut l = answered(t0);
    l.on_reply(None, t0 + ms(400), Some(1000.4));
    assert_eq!(l.poll(t0 + PROBE_EVERY), None);
    assert_eq!(l.next_wake(), Some(t0 + ms(400) + PROBE_EVERY));
}

#[test]
fn a_refused_probe_is_retried_at_the_retry_pace_not_at_once() {
    let t0 = crate::testing::now();
    let mut l = Standing::new(t0, None);
    assert_eq!(l.poll(t0), Some(Request::Probe));
    assert_eq!(l.on_probe(t0, Err(())), Seen::default());
    assert_eq!(l.poll(t0), None, "no spin on a refused connection");
    assert_eq!(l.next_wake(), Some(t0 + PROBE_RETRY));
    assert_eq!(l.poll(t0 + PROBE_RETRY), Some(Request::Probe));
}

#[test]
fn a_stalled_redis_is_probed_at_the_retry_pace() {
    let t0 = crate::testing::now();
    let mut l = answered(t0);
    let mut at = t0 + PROBE_EVERY;
    // Past STALL since the last reply: 500 ms, then 12 refused probes 100 ms apart.
    for _ in 0..12 {
        assert_eq!(l.poll(at), Some(Request::Probe));
        l.on_probe(at, Err(()));
        at += PROBE_RETRY;
    }
    let back = l
        .on_probe(at, probe(1002.0, None, ""))
        .outage
        .expect("an outage after STALL without replies");
    assert_eq!(back.from, 1000.0);
}

/// Polls at `at`, answering the canary's probes (every [`CANARY_EVERY`]) on the way.
fn poll_past_probes(l: &mut Standing, at: Instant, time: f64) -> Option<Request> {
    loop {
        match l.poll(at) {
            Some(Request::Probe) => {
                l.on_probe(at, probe(time, None, ""));
            }
            other => return other,
        }
    }
}

#[test]
fn permissions_are_proven_again_at_their_pace_until_they_hold() {
    let t0 = crate::testing::now();
    let mut l = answered(t0);
    l.on_refusal(t0);
    l.on_refusal(t0 + ms(10));
    assert_eq!(l.poll(t0 + ms(10)), None);
    assert_eq!(
        l.next_wake(),
        Some(t0 + PROBE_EVERY),
        "the probe comes first"
    );
    let due = t0 + REFUSED_RECHECK;
    l.on_reply(None, due, Some(1005.0));
    assert_eq!(
        poll_past_probes(&mut l, due, 1005.0),
        Some(Request::ProvePermissions)
    );
    assert_eq!(
        poll_past_probes(&mut l, due, 1005.0),
        None,
        "one proof in flight"
    );
    l.on_proof(due + ms(5), false);
    assert_eq!(poll_past_probes(&mut l, due + ms(5), 1005.0), None);
    let again = due + ms(5) + REFUSED_RECHECK;
    l.on_reply(None, again, Some(1010.0));
    assert_eq!(
        poll_past_probes(&mut l, again, 1010.0),
        Some(Request::ProvePermissions)
    );
    l.on_proof(again, true);
    let later = again + Duration::from_secs(60);
    l.on_reply(None, later, Some(1070.0));
    assert_eq!(
        poll_past_probes(&mut l, later, 1070.0),
        None,
        "no proof once permitted"
    );
}

/// Answers the next probe at Redis time `time` with the canary at `count` and `run_id`.
fn answer(l: &mut Standing, time: f64, count: Option<u64>, run_id: &str) -> Seen {
    let now = crate::testing::now();
    assert_eq!(l.poll(now), Some(Request::Probe), "a probe is due");
    l.on_probe(now, probe(time, count, run_id))
}

#[test]
fn a_new_run_id_spares_every_member_for_a_ttl_from_the_answer() {
    let mut l = answered(crate::testing::now());
    crate::testing::advance(secs(1));
    // An instant restart: no gap long enough for an outage, but a new run_id.
    let seen = answer(&mut l, 1001.0, Some(8), "b");
    assert_eq!(seen.reset, Some(Reset::Restarted));
    assert_eq!(seen.outage, None, "no outage to count");
    let now = crate::testing::now();
    assert_eq!(l.spare_until(now, 6.0), Some(1007.0));
    assert_eq!(l.judge_at(now), Some(1001.0));
}

#[test]
fn a_counter_that_goes_back_is_a_rewind() {
    let mut l = answered(crate::testing::now());
    crate::testing::advance(secs(1));
    assert_eq!(answer(&mut l, 1001.0, Some(8), "a").reset, None);
    crate::testing::advance(secs(1));
    // A failover to a replica that missed the last increments.
    let seen = answer(&mut l, 1002.0, Some(6), "a");
    assert_eq!(seen.reset, Some(Reset::Rewound { from: 8, to: 6 }));
    assert_eq!(l.spare_until(crate::testing::now(), 45.0), Some(1047.0));
    // Equal is a rewind too: the increment should have made it one more.
    crate::testing::advance(secs(1));
    assert_eq!(answer(&mut l, 1003.0, Some(7), "a").reset, None);
    crate::testing::advance(secs(1));
    let seen = answer(&mut l, 1004.0, Some(7), "a");
    assert_eq!(seen.reset, Some(Reset::Rewound { from: 7, to: 7 }));
}

#[test]
fn a_counter_back_at_one_is_a_flush() {
    let mut l = answered(crate::testing::now());
    crate::testing::advance(secs(1));
    let seen = answer(&mut l, 1001.0, Some(1), "a");
    assert_eq!(seen.reset, Some(Reset::Rewound { from: 7, to: 1 }));
    assert_eq!(seen.outage, None);
    assert_eq!(l.spare_until(crate::testing::now(), 5.0), Some(1006.0));
}

#[test]
fn without_the_canary_the_run_id_still_tells_a_restart() {
    let t0 = crate::testing::now();
    let mut l = Standing::new(t0, None);
    l.poll(t0);
    let refused = Ok(Evidence {
        time: 1000.0,
        canary: Reading::Refused,
        run_id: Some("a".into()),
    });
    assert!(l.on_probe(t0, refused.clone()).canary_refused, "said once");
    crate::testing::advance(secs(1));
    l.poll(crate::testing::now());
    let again = l.on_probe(crate::testing::now(), refused);
    assert!(!again.canary_refused, "said only once");
    assert_eq!(again.reset, None);
    crate::testing::advance(secs(1));
    // A missing reading (a redirection, a refused INFO) is no evidence either way.
    assert_eq!(answer(&mut l, 1002.0, None, "").reset, None);
    crate::testing::advance(secs(1));
    assert_eq!(
        answer(&mut l, 1003.0, None, "c").reset,
        Some(Reset::Restarted)
    );
}

#[test]
fn a_pause_of_the_daemon_is_no_outage_and_no_credit() {
    let mut l = answered(crate::testing::now());
    // SIGSTOP for 6 s.
    crate::testing::advance(secs(6) + PROBE_EVERY);
    let resumed = crate::testing::now();
    l.on_pause(resumed, secs(6));
    assert!(
        !l.judging(),
        "a probe first: Redis may have restarted meanwhile"
    );
    assert_eq!(l.judge_at(resumed), None);
    assert!(l.next_wake().unwrap() <= resumed, "probe at once");
    let seen = answer(&mut l, 1006.5, Some(8), "a");
    assert_eq!(seen, Seen::default(), "no outage, no reset");
    assert_eq!(l.credit(), None);
    // Zombies due meanwhile are judged at Redis's now at once.
    assert_eq!(l.judge_at(resumed), Some(1006.5));
    assert_eq!(l.spare_until(resumed, 3.0), None);
}

#[test]
fn redis_silent_past_a_pause_is_still_an_outage() {
    let mut l = answered(crate::testing::now());
    crate::testing::advance(secs(3));
    l.on_pause(crate::testing::now(), secs(3) - PROBE_EVERY);
    // Redis does not answer after the resume either, for 5 s.
    let mut failed = 0;
    for _ in 0..50 {
        if l.poll(crate::testing::now()) == Some(Request::Probe) {
            l.on_probe(crate::testing::now(), Err(()));
            failed += 1;
        }
        crate::testing::advance(PROBE_RETRY);
    }
    assert!(failed > 40);
    let seen = answer(&mut l, 1008.0, Some(8), "a");
    assert!(seen.outage.is_some(), "the silence after the pause counts");
    assert_eq!(l.spare_until(crate::testing::now(), 6.0), Some(1014.0));
}

#[test]
fn a_failure_stops_judging_until_a_probe_answers() {
    let mut l = answered(crate::testing::now());
    crate::testing::advance(ms(200));
    l.on_failure();
    assert_eq!(l.judge_at(crate::testing::now()), None);
    assert!(
        l.next_wake().unwrap() <= crate::testing::now(),
        "probe at once"
    );
    assert_eq!(answer(&mut l, 1000.2, Some(8), "a"), Seen::default());
    assert!(l.judging());
}

#[test]
fn a_followed_failover_spares_every_member() {
    let mut l = answered(crate::testing::now());
    crate::testing::advance(secs(1));
    l.on_moved(crate::testing::now());
    assert!(!l.judging());
    // The replica had every increment: still a failover, so a credit.
    let seen = answer(&mut l, 1001.0, Some(8), "r");
    assert_eq!(seen.reset, Some(Reset::Restarted));
    assert_eq!(l.spare_until(crate::testing::now(), 6.0), Some(1007.0));
}

#[test]
fn the_credit_ends_a_ttl_after_the_answer_and_the_guard_stays_armed() {
    let mut l = answered(crate::testing::now());
    crate::testing::advance(secs(5));
    let seen = answer(&mut l, 1005.0, Some(2), "a");
    assert!(seen.outage.is_some() && seen.reset.is_some());
    for s in 1..=6 {
        crate::testing::advance(secs(1));
        let now = crate::testing::now();
        l.on_reply(None, now, Some(1005.0 + s as f64));
        let judge = l.judge_at(now).unwrap();
        // Redis answers: the credit holds no instant back, so a storm hold may start.
        assert!(!l.held_back(now, judge), "armed during the credit");
        let spared = l.spare_until(now, 6.0);
        assert_eq!(spared, (s < 6).then_some(1011.0), "at +{s} s");
    }
    // Redis silent: the instant is held back, the guard reads no silence into it.
    crate::testing::advance(secs(3));
    let now = crate::testing::now();
    assert!(l.held_back(now, l.judge_at(now).unwrap()));
}

#[test]
fn the_canary_is_written_every_second_however_busy() {
    let mut l = answered(crate::testing::now());
    for _ in 0..10 {
        crate::testing::advance(ms(100));
        l.on_reply(None, crate::testing::now(), None);
        if crate::testing::now() >= l.next_wake().unwrap() {
            break;
        }
    }
    assert_eq!(l.poll(crate::testing::now()), Some(Request::Probe));
}

#[test]
fn the_verdict_is_the_judging_instant_the_hold_back_and_the_credit_in_one() {
    let t0 = crate::testing::now();
    let mut l = answered(t0);
    assert_eq!(
        l.verdict(t0, 45.0),
        Some(Verdict {
            judge_at: 1000.0,
            held_back: false,
            spare_until: None
        })
    );
    let back = t0 + secs(10);
    l.on_reply(None, back, Some(1010.0))
        .outage
        .expect("an outage");
    let v = l.verdict(back, 45.0).expect("judging");
    assert_eq!((v.judge_at, v.spare_until), (1010.0, Some(1055.0)));
}

#[test]
fn no_verdict_while_in_doubt() {
    let t0 = crate::testing::now();
    let mut l = answered(t0);
    l.on_failure();
    assert_eq!(l.verdict(t0, 45.0), None);
    let silent = t0 + secs(10);
    l.on_probe(t0, probe(1000.0, Some(8), "a"));
    let v = l.verdict(silent, 45.0).expect("judging");
    assert!(
        v.held_back,
        "judged no later than STALL past the last answer"
    );
    assert_eq!(v.judge_at, 1000.0 + STALL.as_secs_f64());
}

#[test]
fn a_forward_step_of_redis_s_clock_gives_every_member_a_ttl_of_real_time() {
    let t0 = crate::testing::now();
    let mut l = answered(t0);
    // 1 s later by the daemon's clock, Redis's reads 31 s later: a 30 s step.
    let at = t0 + secs(1);
    let seen = l.on_reply(Some(at), at, Some(1031.0));
    assert_eq!(seen.step, Some(ClockStep::Forward(30.0)));
    assert_eq!(seen.outage, None);
    let v = l.verdict(at, 6.0).expect("judging");
    assert_eq!(v.judge_at, 1031.0, "judged on Redis's new time");
    assert_eq!(
        v.spare_until,
        Some(1037.0),
        "a full ttl of real time from the step"
    );
    assert!(l.verdict(at + secs(7), 6.0).unwrap().spare_until.is_none());
}

#[test]
fn a_backward_step_is_reported_and_gives_no_credit() {
    let t0 = crate::testing::now();
    let mut l = answered(t0);
    let seen = l.on_reply(Some(t0 + secs(1)), t0 + secs(1), Some(971.0));
    assert_eq!(seen.step, Some(ClockStep::Backward(30.0)));
    assert_eq!(l.credit(), None, "zombies only leave later");
    assert_eq!(l.judge_at(t0 + secs(1)), Some(971.0));
}

#[test]
fn a_failed_reply_s_clock_shows_a_step_too() {
    let t0 = crate::testing::now();
    let mut l = answered(t0);
    assert_eq!(
        l.observe_time(Some(t0 + secs(1)), t0 + secs(1), 1001.2),
        None
    );
    let step = l
        .observe_time(Some(t0 + secs(2)), t0 + secs(2), 1006.0)
        .expect("a step");
    assert!((step.seconds() - 3.8).abs() < 1e-9, "{step:?}");
    assert_eq!(l.spare_until(t0 + secs(2), 5.0), Some(1011.0));
}

#[test]
fn a_followed_failover_s_clock_is_no_step() {
    let t0 = crate::testing::now();
    let mut l = answered(t0);
    l.on_moved(t0);
    assert_eq!(l.poll(t0), Some(Request::Probe));
    let seen = l.on_probe(t0 + secs(1), probe(500.0, Some(1), "b"));
    assert_eq!(seen.step, None);
    assert!(seen.reset.is_some(), "its data is another's: a credit");
}

fn canary(time: f64, canary: Reading) -> Result<Evidence, ()> {
    Ok(Evidence {
        time,
        canary,
        run_id: Some("a".into()),
    })
}

#[test]
fn refused_writes_stop_every_judgement_until_taken_again_then_credit() {
    let t0 = crate::testing::now();
    let mut l = answered(t0);
    let oom = Reading::WritesRefused(WriteRefusal::Oom);
    assert_eq!(l.poll(t0 + secs(1)), Some(Request::Probe));
    let seen = l.on_probe(t0 + secs(1), canary(1001.0, oom));
    assert_eq!(seen.writes, Some(Writes::Refused(WriteRefusal::Oom)));
    assert!(!l.judging(), "the apps cannot heartbeat");
    assert_eq!(l.verdict(t0 + secs(1), 4.0), None);
    // Still refused: said once.
    assert_eq!(l.poll(t0 + secs(2)), Some(Request::Probe));
    assert_eq!(l.on_probe(t0 + secs(2), canary(1002.0, oom)).writes, None);
    assert!(!l.judging());
    // Taken again 15 s later: every member gets a full ttl from then, since the last write.
    assert_eq!(l.poll(t0 + secs(16)), Some(Request::Probe));
    let seen = l.on_probe(t0 + secs(16), canary(1016.0, Reading::Count(9)));
    assert_eq!(seen.writes, Some(Writes::Taken { seconds: 16.0 }));
    let v = l.verdict(t0 + secs(16), 4.0).expect("judging again");
    assert_eq!(v.spare_until, Some(1020.0));
    assert_eq!(
        l.credit().unwrap().from,
        1000.0,
        "since the last write taken"
    );
}

#[test]
fn a_canary_the_acl_refuses_says_nothing_of_writes() {
    let t0 = crate::testing::now();
    let mut l = answered(t0);
    assert_eq!(l.poll(t0 + secs(1)), Some(Request::Probe));
    let seen = l.on_probe(t0 + secs(1), canary(1001.0, Reading::Refused));
    assert_eq!(seen.writes, None);
    assert!(l.judging());
}

#[test]
fn a_probe_sent_before_a_pause_does_not_end_its_doubt() {
    let mut l = answered(crate::testing::now());
    crate::testing::advance(secs(1));
    assert_eq!(l.poll(crate::testing::now()), Some(Request::Probe));
    // The daemon is paused with the probe in flight; its answer comes after the resume.
    crate::testing::advance(secs(3));
    l.on_pause(crate::testing::now(), secs(3));
    l.on_probe(crate::testing::now(), probe(1004.0, Some(8), "a"));
    assert!(!l.judging(), "its evidence is from before the pause");
    assert_eq!(
        l.poll(crate::testing::now()),
        Some(Request::Probe),
        "another, at once"
    );
    l.on_probe(crate::testing::now(), probe(1004.0, Some(9), "a"));
    assert!(l.judging());
}

#[test]
fn a_probe_held_behind_a_write_pause_credits_from_its_arrival() {
    let mut l = answered(crate::testing::now());
    // Redis holds writes (CLIENT PAUSE WRITE): the probe's TIME runs at once, at 1010, and its
    // canary write waits, and the reply with it, 4.5 s more.
    crate::testing::advance(secs(10));
    assert_eq!(l.poll(crate::testing::now()), Some(Request::Probe));
    crate::testing::advance(ms(4500));
    let seen = l.on_probe(crate::testing::now(), probe(1010.0, Some(8), "a"));
    assert!(seen.outage.is_some());
    let credit = l.credit().expect("a credit");
    assert!(
        (credit.to - 1014.5).abs() < 1e-9,
        "from when the write was taken: {credit:?}"
    );
    assert_eq!(
        l.spare_until(crate::testing::now(), 4.0),
        Some(credit.to + 4.0)
    );
}
