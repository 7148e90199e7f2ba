#!/usr/bin/env python3
"""Reference decoder for the tickbox wire format, written from docs/book/src/wire.md alone.

Two modes, each printing one JSON object per decoded frame, one per line:

    tickbox_decode.py frame [--tap] [HEX ...]
        Decodes frames given as hex strings (whitespace inside a string is ignored); with no HEX argument, reads
        one hex frame per line from standard input, skipping blank lines.

    tickbox_decode.py live [--count N] [--timeout S] [--idle-ms MS] [--subscribe PREFIX] [--tap] ENDPOINT ...
        Connects a ZeroMQ SUB socket (pyzmq) to every ENDPOINT, subscribes to PREFIX (default: everything), and
        decodes N messages (0: no limit). Stops early, successfully, when nothing arrived for MS milliseconds
        after the first message (--idle-ms); gives up after S seconds.

With --tap, frames starting with the tap's event marker (0x00) are decoded as subscription events instead of being
rejected as frames with an empty topic.

Exit status: 0 on success; 1 on a frame that cannot be decoded (the reason goes to standard error, after the
frames decoded before it); 2 on bad usage; 3 when --timeout passed before --count frames arrived; 4 when pyzmq
is missing (live mode only).

The decoder uses only the standard library (struct) apart from pyzmq for live mode.
"""

import argparse
import json
import struct
import sys
import time

# Section 1: prices are i64 counts of 1e-9.
PRICE_SCALE = 1_000_000_000

# Section 4: the header, by version. version u8, kind u8, flags u16, publisher_id u32, sequence u64,
# send_time_ns u64, origin_time_ns u64, then (version 2 only) session u64; little-endian, no padding.
HEADER_FIELDS = ("version", "kind", "flags", "publisher_id", "sequence", "send_time_ns", "origin_time_ns")
HEADERS = {
    2: struct.Struct("<BBHIQQQQ"),  # 40 bytes
    1: struct.Struct("<BBHIQQQ"),  # 32 bytes, no session
}

# Section 4: flag bits.
FLAG_NAMES = {0x0001: "CACHED", 0x0002: "REPLAY"}

# Section 6: enumerations.
SIDES = {0: "none", 1: "buy", 2: "sell"}
CAUSES = {1: "not_received"}

# Section 6: kinds. Each payload field is (name, struct code, enumeration or None); prices are the `px`/`price`
# fields, which also get a decimal rendering.
KINDS = {
    1: (
        "quote",
        "Q",
        [
            ("instrument_id", "I", None),
            ("bid_px", "q", None),
            ("ask_px", "q", None),
            ("bid_size", "I", None),
            ("ask_size", "I", None),
            ("bid_orders", "I", None),
            ("ask_orders", "I", None),
            ("venue_time_ns", "Q", None),
        ],
    ),
    2: (
        "trade",
        "T",
        [
            ("instrument_id", "I", None),
            ("price", "q", None),
            ("size", "I", None),
            ("aggressor", "B", SIDES),
            ("trade_id", "Q", None),
            ("venue_time_ns", "Q", None),
        ],
    ),
    3: (
        "heartbeat",
        "H",
        [
            ("interval_ns", "Q", None),
            ("messages_sent", "Q", None),
        ],
    ),
    4: (
        "book_level",
        "B",
        [
            ("instrument_id", "I", None),
            ("side", "B", SIDES),
            ("level", "B", None),
            ("price", "q", None),
            ("size", "I", None),
            ("order_count", "I", None),
            ("venue_time_ns", "Q", None),
        ],
    ),
    5: (
        "gap",
        "G",
        [
            ("first_missing", "Q", None),
            ("last_missing", "Q", None),
            ("detected_ns", "Q", None),
            ("cause", "B", CAUSES),
        ],
    ),
}
PAYLOADS = {
    kind: struct.Struct("<" + "".join(code for _, code, _ in fields)) for kind, (_, _, fields) in KINDS.items()
}
PRICE_FIELDS = ("bid_px", "ask_px", "price")

# Section 9: tap subscription events.
EVENT_MARKER = 0x00


class DecodeError(ValueError):
    """A frame that is not a valid tickbox frame (docs/book/src/wire.md, section 10)."""


# Section 2, "Batch frames": several frames in one message, each prefixed by its u16 length.
BATCH_PREFIX = b"#B\x00"
BATCH_VERSION = 1
BATCH_HEADER = struct.Struct("<BBH")


def decode_batch(frame: bytes) -> dict:
    """Decodes a batch frame: its version and count, and each record as decode_frame would alone."""
    body = frame[len(BATCH_PREFIX) :]
    if len(body) < BATCH_HEADER.size:
        raise DecodeError(f"truncated batch header: needs {BATCH_HEADER.size} bytes, got {len(body)}")
    version, _reserved, count = BATCH_HEADER.unpack_from(body, 0)
    if version != BATCH_VERSION:
        raise DecodeError(f"unknown batch version {version}")
    offset = BATCH_HEADER.size
    records = []
    for index in range(count):
        if offset + 2 > len(body):
            raise DecodeError(f"batch record {index} of {count}: length cut short")
        (length,) = struct.unpack_from("<H", body, offset)
        offset += 2
        if length == 0:
            raise DecodeError(f"batch record {index} of {count}: zero length")
        if offset + length > len(body):
            raise DecodeError(f"batch record {index} of {count}: {length} bytes declared, {len(body) - offset} left")
        records.append(decode_frame(body[offset : offset + length]))
        offset += length
    if offset != len(body):
        raise DecodeError(f"{len(body) - offset} bytes after the batch's last record")
    return {"batch_version": version, "count": count, "records": records}


def decode_frame(frame: bytes) -> dict:
    """Decodes one wire frame into a dict: topic, every header field, and the payload's fields by kind. A batch
    frame decodes to its records (decode_batch)."""
    frame = bytes(frame)
    if frame.startswith(BATCH_PREFIX):
        return decode_batch(frame)
    nul = frame.find(b"\x00")
    if nul < 0:
        raise DecodeError("no topic terminator (no NUL byte)")
    if nul == 0:
        raise DecodeError("empty topic (a frame starting with NUL is a tap event, not a message)")
    try:
        topic = frame[:nul].decode("utf-8")
    except UnicodeDecodeError as err:
        raise DecodeError(f"topic is not UTF-8: {err}") from None
    rest = frame[nul + 1 :]
    if not rest:
        raise DecodeError("truncated: no header after the topic")
    version = rest[0]
    header_struct = HEADERS.get(version)
    if header_struct is None:
        raise DecodeError(f"unknown wire version {version}")
    if len(rest) < header_struct.size:
        raise DecodeError(f"truncated header: version {version} needs {header_struct.size} bytes, got {len(rest)}")
    values = header_struct.unpack_from(rest, 0)
    header = dict(zip(HEADER_FIELDS, values))
    header["session"] = values[7] if version == 2 else 0
    kind = header["kind"]
    if kind not in KINDS:
        raise DecodeError(f"unknown kind {kind}")
    kind_name, _letter, fields = KINDS[kind]
    payload_bytes = rest[header_struct.size :]
    payload_struct = PAYLOADS[kind]
    if len(payload_bytes) != payload_struct.size:
        raise DecodeError(f"{kind_name} payload must be {payload_struct.size} bytes, got {len(payload_bytes)}")
    payload = {}
    for (name, _code, enum), value in zip(fields, payload_struct.unpack(payload_bytes)):
        if enum is not None:
            if value not in enum:
                raise DecodeError(f"invalid {name} value {value} in {kind_name} payload")
            value = enum[value]
        payload[name] = value
    for name in PRICE_FIELDS:
        if name in payload:
            payload[name + "_decimal"] = price_text(payload[name])
    flags = header["flags"]
    return {
        "topic": topic,
        "version": version,
        "header_len": header_struct.size,
        "kind": kind,
        "kind_name": kind_name,
        "flags": flags,
        "flag_names": flag_names(flags),
        "publisher_id": header["publisher_id"],
        "sequence": header["sequence"],
        "send_time_ns": header["send_time_ns"],
        "origin_time_ns": header["origin_time_ns"],
        "session": header["session"],
        "payload": payload,
    }


def decode_tap_frame(frame: bytes) -> dict:
    """Decodes a frame read from the tap: a subscription event (section 9) or a wire frame."""
    frame = bytes(frame)
    if frame[:1] == bytes([EVENT_MARKER]):
        if len(frame) < 2 or frame[1] not in (0, 1):
            raise DecodeError("malformed tap event (truncated, or an event byte other than 0 or 1)")
        prefix = frame[2:]
        return {
            "event": "subscribe" if frame[1] == 1 else "unsubscribe",
            "prefix": prefix.decode("utf-8", errors="replace"),
            "prefix_hex": prefix.hex(),
        }
    return decode_frame(frame)


def flag_names(flags: int) -> list:
    """Names of the set flag bits; unknown bits are kept as hex (readers ignore them, section 10)."""
    names = []
    for bit in range(16):
        value = 1 << bit
        if flags & value:
            names.append(FLAG_NAMES.get(value, f"0x{value:04x}"))
    return names


def price_text(units: int) -> str:
    """A fixed-point price as an exact decimal string (189250000000 -> "189.25")."""
    sign = "-" if units < 0 else ""
    whole, frac = divmod(abs(units), PRICE_SCALE)
    frac_text = f"{frac:09d}".rstrip("0")
    return f"{sign}{whole}.{frac_text}" if frac_text else f"{sign}{whole}"


def parse_hex(text: str) -> bytes:
    digits = "".join(text.split())
    try:
        return bytes.fromhex(digits)
    except ValueError as err:
        raise DecodeError(f"not a hex string: {err}") from None


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def fail(reason: str, frame: bytes = b"") -> int:
    detail = {"error": reason}
    if frame:
        detail["frame_hex"] = frame.hex()
    sys.stderr.write("tickbox_decode: cannot decode frame: " + json.dumps(detail) + "\n")
    return 1


def run_frames(args) -> int:
    decode = decode_tap_frame if args.tap else decode_frame
    if args.hex:
        texts = args.hex
    else:
        texts = [line for line in sys.stdin.read().splitlines() if line.strip()]
    for text in texts:
        frame = b""
        try:
            frame = parse_hex(text)
            emit(decode(frame))
        except DecodeError as err:
            return fail(str(err), frame)
    return 0


def run_live(args) -> int:
    try:
        import zmq  # pylint: disable=import-outside-toplevel
    except ImportError:
        sys.stderr.write("tickbox_decode: live mode needs pyzmq (python3 -m pip install pyzmq)\n")
        return 4
    decode = decode_tap_frame if args.tap else decode_frame
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    try:
        for endpoint in args.endpoints:
            sub.connect(endpoint)
        for prefix in args.subscribe or [""]:
            sub.setsockopt(zmq.SUBSCRIBE, prefix.encode("utf-8"))
        deadline = time.monotonic() + args.timeout
        idle = args.idle_ms / 1000.0 if args.idle_ms else None
        decoded = 0
        last_at = None
        while args.count == 0 or decoded < args.count:
            now = time.monotonic()
            wait = deadline - now
            if idle is not None and last_at is not None:
                if now - last_at >= idle:
                    return 0
                wait = min(wait, last_at + idle - now)
            if wait <= 0:
                if args.count == 0:
                    return 0
                sys.stderr.write(f"tickbox_decode: timed out after {decoded} of {args.count} frames\n")
                return 3
            if not sub.poll(timeout=max(1, int(wait * 1000))):
                continue
            frame = sub.recv()
            last_at = time.monotonic()
            try:
                emit(decode(frame))
            except DecodeError as err:
                return fail(str(err), frame)
            decoded += 1
        return 0
    finally:
        sub.close(linger=0)
        ctx.term()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Decode tickbox wire frames (docs/book/src/wire.md) to JSON lines.")
    modes = parser.add_subparsers(dest="mode", required=True)
    frame = modes.add_parser("frame", help="decode hex frames from the arguments or standard input")
    frame.add_argument("--tap", action="store_true", help="accept tap subscription events")
    frame.add_argument("hex", nargs="*", help="a frame as hex; none: one per line on standard input")
    live = modes.add_parser("live", help="subscribe to endpoints and decode what arrives")
    live.add_argument("--count", type=int, default=10, help="frames to decode; 0 for no limit (default 10)")
    live.add_argument("--timeout", type=float, default=30.0, help="give up after this many seconds (default 30)")
    live.add_argument("--idle-ms", type=int, default=0, help="stop when idle this long after the first frame")
    live.add_argument("--subscribe", action="append", help="topic prefix to subscribe to (repeatable)")
    live.add_argument("--tap", action="store_true", help="accept tap subscription events")
    live.add_argument("endpoints", nargs="+", help="ZeroMQ endpoints to connect to")
    args = parser.parse_args(argv)
    if args.mode == "frame":
        return run_frames(args)
    if args.count < 0 or args.timeout <= 0 or args.idle_ms < 0:
        parser.error("--count and --idle-ms must be >= 0 and --timeout > 0")
    return run_live(args)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        sys.exit(0)
    except KeyboardInterrupt:
        sys.exit(130)
