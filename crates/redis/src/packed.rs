//! Commands of the data path, encoded once as RESP into one buffer.
//!
//! A pass sends a few commands per key, and building them as redis-rs `Cmd`s (two allocations
//! each, then packed again into the pipeline's own buffer) cost the sweeper more than Redis spent
//! running some of them. A [`Packed`] batch is written straight into its final form and handed to
//! a node's wire as it is ([`SendPacked`]) (a cluster's sharded publishing splits one among the nodes by slot:
//! `slots`).

use redis::RedisFuture;

use crate::resp::Value;

/// Commands encoded as RESP arrays of bulk strings, in the order they are sent.
#[derive(Debug, Default, Clone)]
pub struct Packed {
    bytes: Vec<u8>,
    commands: usize,
}

impl Packed {
    /// An empty batch with room for about `bytes` bytes of commands.
    pub fn with_capacity(bytes: usize) -> Self {
        Self {
            bytes: Vec::with_capacity(bytes),
            commands: 0,
        }
    }

    /// Appends one command.
    pub fn command(&mut self, args: &[&[u8]]) -> &mut Self {
        // No reserve here: the caller sized the batch, and asking for room per command would make
        // a batch sized up front double (and copy itself) near its end.
        self.header(b'*', args.len());
        for arg in args {
            self.header(b'$', arg.len());
            self.bytes.extend_from_slice(arg);
            self.bytes.extend_from_slice(b"\r\n");
        }
        self.commands += 1;
        self
    }

    fn header(&mut self, kind: u8, n: usize) {
        // Argument counts and most lengths have one or two digits.
        match n {
            0..=9 => self
                .bytes
                .extend_from_slice(&[kind, b'0' + n as u8, b'\r', b'\n']),
            10..=99 => self.bytes.extend_from_slice(&[
                kind,
                b'0' + (n / 10) as u8,
                b'0' + (n % 10) as u8,
                b'\r',
                b'\n',
            ]),
            _ => {
                self.bytes.push(kind);
                let mut digits = itoa::Buffer::new();
                self.bytes.extend_from_slice(digits.format(n).as_bytes());
                self.bytes.extend_from_slice(b"\r\n");
            }
        }
    }

    /// How many commands the batch holds: as many replies come back.
    pub fn len(&self) -> usize {
        self.commands
    }

    /// How many bytes the batch's commands take.
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the batch holds no command.
    pub fn is_empty(&self) -> bool {
        self.commands == 0
    }

    /// The encoded commands.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Each command's bytes and its arguments, in order.
    pub fn commands(&self) -> Vec<(&[u8], Vec<&[u8]>)> {
        let mut commands = Vec::with_capacity(self.commands);
        let mut at = 0;
        // Our own encoding, so its shape is known: a count, then that many bulk strings.
        for _ in 0..self.commands {
            let start = at;
            let argc = self.number_at(&mut at);
            let mut args = Vec::with_capacity(argc);
            for _ in 0..argc {
                let len = self.number_at(&mut at);
                args.push(&self.bytes[at..at + len]);
                at += len + 2;
            }
            commands.push((&self.bytes[start..at], args));
        }
        commands
    }

    /// Appends a command as [`Packed::commands`] gave it.
    pub fn encoded(&mut self, command: &[u8]) -> &mut Self {
        self.bytes.extend_from_slice(command);
        self.commands += 1;
        self
    }

    /// The number of the header line at `*at`, moving `*at` past it.
    fn number_at(&self, at: &mut usize) -> usize {
        let line = &self.bytes[*at + 1..];
        let end = line.iter().position(|&b| b == b'\r').unwrap_or(0);
        *at += 1 + end + 2;
        line[..end]
            .iter()
            .fold(0, |n, d| n * 10 + usize::from(d - b'0'))
    }
}

/// A connection that takes [`Packed`] batches. Every reply comes back in order, error replies
/// as [`Value::ServerError`]; `Err` means the request itself failed (connection, timeout).
pub trait SendPacked {
    /// Sends `batch` and returns one reply per command.
    fn send_packed(&mut self, batch: Packed) -> RedisFuture<'_, Vec<Value>>;

    /// Sends `batch` and returns its replies as RESP bytes, one whole reply per command, to
    /// read in place with [`Reader`](crate::resp::Reader).
    fn send_packed_raw(&mut self, batch: Packed) -> RedisFuture<'_, Vec<u8>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_any_length_and_never_grows_a_batch_sized_up_front() {
        for n in [0usize, 1, 9, 10, 99, 100, 999, 1000, 123_456] {
            let arg = vec![b'x'; n];
            let mut one = Packed::default();
            one.command(&[b"SET", &arg]);
            assert_eq!(
                one.into_bytes(),
                redis::cmd("SET").arg(&arg).get_packed_command()
            );
        }
        // A batch sized up front for its commands never grows, so it is never copied.
        let keys: Vec<Vec<u8>> = (0..300)
            .map(|i| format!("presence:c{i}:online").into_bytes())
            .collect();
        let fill = |batch: &mut Packed| {
            for key in &keys {
                batch.command(&[b"ZRANGE", key, b"-100", b"-1"]);
            }
        };
        let mut sizing = Packed::default();
        fill(&mut sizing);
        let mut batch = Packed::with_capacity(sizing.into_bytes().len());
        let capacity = batch.bytes.capacity();
        fill(&mut batch);
        assert_eq!(batch.bytes.capacity(), capacity);
    }

    #[test]
    fn encodes_resp_and_splits_into_its_commands() {
        let mut batch = Packed::default();
        batch
            .command(&[b"ZCOUNT", b"presence:c1:online", b"-inf", b"(17.5"])
            .command(&[b"PUBLISH", b"ch", b"{\"a\":\"x\r\ny\"}"])
            .command(&[b"TIME"]);
        assert_eq!(batch.len(), 3);
        let mut expected = redis::pipe();
        expected
            .cmd("ZCOUNT")
            .arg("presence:c1:online")
            .arg("-inf")
            .arg("(17.5")
            .cmd("PUBLISH")
            .arg("ch")
            .arg("{\"a\":\"x\r\ny\"}")
            .cmd("TIME");
        let commands = batch.commands();
        assert_eq!(
            commands[1].1,
            [&b"PUBLISH"[..], b"ch", b"{\"a\":\"x\r\ny\"}"]
        );
        // Split and joined again, in another order: the same commands.
        let mut again = Packed::default();
        for (bytes, _) in commands.iter().rev() {
            again.encoded(bytes);
        }
        let mut reversed = Packed::default();
        reversed
            .command(&[b"TIME"])
            .command(&[b"PUBLISH", b"ch", b"{\"a\":\"x\r\ny\"}"])
            .command(&[b"ZCOUNT", b"presence:c1:online", b"-inf", b"(17.5"]);
        assert_eq!(again.len(), 3);
        assert_eq!(again.into_bytes(), reversed.into_bytes());
        assert_eq!(batch.into_bytes(), expected.get_packed_pipeline());
    }
}
