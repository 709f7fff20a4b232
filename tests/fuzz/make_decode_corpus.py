#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_decode: small LocationBatch messages,
valid and deliberately odd, encoded by hand (protobuf wire format) so the
generator needs nothing beyond Python.

    tests/fuzz/make_decode_corpus.py tests/fuzz/corpus/fuzz_decode
"""
import math
import os
import struct
import sys


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def string(field, text):
    data = text.encode() if isinstance(text, str) else text
    return key(field, 2) + varint(len(data)) + data


def double(field, value):
    return key(field, 1) + struct.pack('<d', value)


def update(user=None, ts=None, lat=None, lon=None, acc=None, profile=None):
    out = b''
    if user is not None:
        out += string(1, user)
    if ts is not None:
        out += key(2, 0) + varint(ts)
    if lat is not None:
        out += double(3, lat)
    if lon is not None:
        out += double(4, lon)
    if acc is not None:
        out += double(5, acc)
    if profile is not None:
        out += string(6, profile)
    return out


def batch(*updates):
    return b''.join(string(1, u) for u in updates)


T0 = 1_700_000_000_000
SEEDS = {
    'one_valid': batch(update('alice', T0, 40.7128, -74.006)),
    'two_users': batch(update('alice', T0, 40.7128, -74.006, 12.5),
                       update('bob', T0 + 1000, 48.8566, 2.3522)),
    'same_user_trace': batch(*[update('u1', T0 + i * 60_000,
                                      40.70 + i * 1e-3, -74.0 + i * 1e-3)
                               for i in range(8)]),
    'exhaust_budget': batch(*[update('x', T0 + i * 1000, 1.0, 2.0)
                              for i in range(32)]),
    'time_backwards': batch(update('t', T0, 0.0, 0.0),
                            update('t', T0 - 1, 0.0, 0.0)),
    'missing_fields': batch(update('m'), update(ts=T0, lat=1.0, lon=1.0),
                            update('', T0, 1.0, 1.0)),
    'bad_values': batch(update('n', T0, math.nan, 0.0),
                        update('i', T0, 0.0, math.inf),
                        update('r', T0, 91.0, 181.0),
                        update('a', T0, 10.0, 10.0, -5.0),
                        update('neg', -1, 10.0, 10.0)),
    'poles_antimeridian': batch(update('p', T0, 90.0, 180.0),
                                update('q', T0, -90.0, -180.0),
                                update('s', T0, 89.9999999, 179.9999999)),
    'profiles': batch(update('p1', T0, 1.0, 1.0, profile='geoind'),
                      update('p1', T0 + 1, 1.0, 1.0, profile='nope'),
                      update('p2', T0, 1.0, 1.0, profile='')),
    'odd_user_ids': batch(update('a\x01b', T0, 1.0, 1.0),
                          update('x' * 200, T0, 1.0, 1.0),
                          update('caf\xe9', T0, 1.0, 1.0),
                          update(b'\xff\xfe', T0, 1.0, 1.0)),
    'far_future': batch(update('f', (1 << 63) - 1, 1.0, 1.0)),
    'empty_batch': b'',
}


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else '.'
    os.makedirs(out_dir, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out_dir, name + '.pb'), 'wb') as f:
            f.write(data)


if __name__ == '__main__':
    main()
