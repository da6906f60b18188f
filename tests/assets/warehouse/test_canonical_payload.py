"""The canonical payload and the derived event key, pinned: each payload below, landed as
an event without `event_id`, is staged (`events_source.parse_batch`, Spark's own
`to_json(parse_json(...))`) to exactly this text and key. Key order at every depth
(Java's, by UTF-16 code units: a non-BMP key sorts before U+FFFF), escapes, number
spellings, empty objects and arrays, deep nesting. A dependency upgrade that changed
any of them would re-key events silently: it fails here instead."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from assets.warehouse.events_source import batch_file, parse_batch

INSTANT = "2024-05-01T10:00:00+00:00"
GOLDEN = [
    (
        '{"b":1,"a":2}',
        '{"a":2,"b":1}',
        "ee9189a92ce04bcb3655198fa945ae11cc2ec01a5cfef6e17a5623596388b8dc",
    ),
    (
        '{ "a" : 1 , "b" : [ 1 , 2 ] }',
        '{"a":1,"b":[1,2]}',
        "99bda6f22aaf0c338b034816071ac4a5e3d57c0d664cf75e5e7b29a7fd2489ae",
    ),
    (
        '{"z":{"y":1,"x":[{"d":1,"c":2}]},"a":0}',
        '{"a":0,"z":{"x":[{"c":2,"d":1}],"y":1}}',
        "13391493acba526f7e9b8c515e55fedc5868a0dfdf49622453108c0d89731766",
    ),
    (
        '{"a":{"c":{"e":{"g":1,"f":2},"d":3},"b":4}}',
        '{"a":{"b":4,"c":{"d":3,"e":{"f":2,"g":1}}}}',
        "4ee491ac5c4519775c6bb7e178e00ea01bbc781c14fb07235250dc3a88195d8c",
    ),
    (
        '{"\\ud83d\\ude00":1,"a":2,"\\uffff":3}',
        '{"a":2,"😀":1,"\uffff":3}',
        "41d2166dd3b105a0e399f8869ab9dd09b14bde7229e0601e5263658d457bd4e3",
    ),
    (
        '{"😀":1,"\uffff":2,"é":3}',
        '{"é":3,"😀":1,"\uffff":2}',
        "4ecbac64463e3a87c656a660399110eb712dba47a4969b2b936f896a184c5f46",
    ),
    (
        '{"é":1,"e":2,"E":3,"_":4,"1":5}',
        '{"1":5,"E":3,"_":4,"e":2,"é":1}',
        "22bf32140a5c08f77c19474a3f68e652685830ab726455c887fe53a9700139ec",
    ),
    (
        '{"aa":1,"a":2,"a ":3,"":4}',
        '{"":4,"a":2,"a ":3,"aa":1}',
        "5a77b52a0dd9a01dc4469a5689be214466c77eee6d3b4e53b9d2bcb95fe816de",
    ),
    (
        '{"s":"quote\\" backslash\\\\ slash\\/"}',
        '{"s":"quote\\" backslash\\\\ slash/"}',
        "b7b3f1176ef7abf29292d95ab70b5d564832656fa61217be83459c254c9e4001",
    ),
    (
        '{"s":"\\b\\f\\n\\r\\t"}',
        '{"s":"\\b\\f\\n\\r\\t"}',
        "a2d90a4271ee10e6c17337ca2bf519a721156aed3c54203c099657a565c8285d",
    ),
    (
        '{"s":"\\u0001\\u001f\\u007f"}',
        '{"s":"\\u0001\\u001F\x7f"}',
        "768e50ca081acf2fb57d1e8e5162cead26fb6b416b83734c9f0317492db9540d",
    ),
    (
        '{"s":"\\u00e9 é \\u2028 \\u2029"}',
        '{"s":"é é \u2028 \u2029"}',
        "abd86d7a32e59cc0f29198fd59b7a383734e7f0b42ab483811ad5f92ea4a2bc6",
    ),
    (
        '{"s":"<script>&amp;\'</script>"}',
        '{"s":"<script>&amp;\'</script>"}',
        "e152c70ca6efcce1f998fc512e8b783edb92fcf974ed25aaab36dd45e067929a",
    ),
    (
        '{"s":"\\ud83d\\ude00 😀"}',
        '{"s":"😀 😀"}',
        "c76236d976b1f35554220350604178b731e8b769b65bbe6ff23909abb1318cb8",
    ),
    ('{"n":2.50}', '{"n":2.5}', "ad8e070b43e909ac58899f4dcf5d463533d529389dd9529da76cee5b691f99c2"),
    ('{"n":2.5}', '{"n":2.5}', "ad8e070b43e909ac58899f4dcf5d463533d529389dd9529da76cee5b691f99c2"),
    (
        '{"n":1e3}',
        '{"n":1000.0}',
        "de2b384fd2e9083b8ccdc60964a2cbce9443f89385f840802d1ab1e39a2d414a",
    ),
    (
        '{"n":1E+3}',
        '{"n":1000.0}',
        "de2b384fd2e9083b8ccdc60964a2cbce9443f89385f840802d1ab1e39a2d414a",
    ),
    (
        '{"n":1.0e-5}',
        '{"n":1.0E-5}',
        "b6caf1f2bf86d9f179f7c9cdbfb8e1ff211fcdf5c44fcae4c3f749ee0ec2b869",
    ),
    ('{"n":-0}', '{"n":0}', "73127174ee4b3ba7460c08f9431dd468ea19f71d78c9a15522600aabf5056f46"),
    ('{"n":0.0}', '{"n":0}', "73127174ee4b3ba7460c08f9431dd468ea19f71d78c9a15522600aabf5056f46"),
    ('{"n":100}', '{"n":100}', "861732cc575ad92bf3ad7309a6e0f7d49d2e20112e8be0c81f395c1a916a7941"),
    (
        '{"n":12345678901234567890}',
        '{"n":12345678901234567890}',
        "5d8502c20311d0732758498fe4dd8487bb8ea84ac2593506a3ac3fe5f20ece35",
    ),
    (
        '{"n":123456789012345678901234567890123456789}',
        '{"n":1.2345678901234568E38}',
        "1b5c10c5119beecf89dc635f71e3d5f63db7c800f44884e3123e41b2c86eb5c9",
    ),
    (
        '{"n":1.5e300}',
        '{"n":1.5E300}',
        "9ff2b76d5554bfa89673e88144908442c2bc53b9fe0f48fb2610fb2cd576cf0e",
    ),
    (
        '{"n":-1.25e-7}',
        '{"n":-1.25E-7}',
        "ef2989b9e6fab32f10b1639a9bccd0aba192e68ab26363a6a591f1db4b6730d9",
    ),
    (
        '{"n":0.1,"m":0.10,"o":0.01e1}',
        '{"m":0.1,"n":0.1,"o":0.1}',
        "9f7e53f3525d4a50dc5f505728541e9614f43791ff4a0385ddee335633a42ff2",
    ),
    (
        '{"n":9007199254740993}',
        '{"n":9007199254740993}',
        "adf44a45cd52354b287e8a8a17542ed270cd1e85adf4d21387c18780ea4e0b83",
    ),
    ("{}", "{}", "04ecabc66df334241927e5865cc8ef8e32be19d818bb90f752bd39567118b291"),
    (
        '{"a":{},"b":[],"c":[{}],"d":[[]]}',
        '{"a":{},"b":[],"c":[{}],"d":[[]]}',
        "c2020be6ac0b291beaf74fa9d73a588a228a3e8f78ffaa3ae3beccd92dc5e49c",
    ),
    (
        '{"deep":[[[[[[[[[[1]]]]]]]]]]}',
        '{"deep":[[[[[[[[[[1]]]]]]]]]]}',
        "f85eecc3855b0cbc3c94593d69384f760202c0ded851d7ab37cff0658ee4ff50",
    ),
    (
        '{"t":true,"f":false,"z":null}',
        '{"f":false,"t":true,"z":null}',
        "e74e37543f2ff71b362b9477d84c3feebc58a6feebfa53b3535cd9216e0dbbba",
    ),
    (
        '{"a":[3,1,2],"b":[{"y":1,"x":2},{"x":1}]}',
        '{"a":[3,1,2],"b":[{"x":2,"y":1},{"x":1}]}',
        "c02963e4bcac70f57c8624120c56daba5eccf5ae349fac15d5c9218de76b418c",
    ),
    (
        '{"long":"' + "x" * 300 + '"}',
        '{"long":"' + "x" * 300 + '"}',
        "6c42fc711b8acaafe35dd5d2eaf5a0a171d89e5cd9810d53d5d220a1f2f8cad8",
    ),
]
"""(payload as landed, its canonical text, the derived key of user `u1` at `INSTANT`)."""


def test_every_payload_stages_to_its_pinned_canonical_text_and_key(spark, landing):
    assert len(GOLDEN) >= 30
    lines = [
        f'{{"event_timestamp":"{INSTANT}","ingestion_time":"{INSTANT}","user_id":"u1",'
        f'"payload":{raw}}}'
        for raw, _, _ in GOLDEN
    ]
    path = Path(landing.root) / batch_file("golden")
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    parsed = parse_batch(spark.session(), landing, "golden", landing.stat(batch_file("golden")))
    staged = sorted(parsed.frame.select("source_line", "payload", "event_id").collect())
    assert [(row.payload, row.event_id) for row in staged] == [
        (canonical, key) for _, canonical, key in GOLDEN
    ]
    # The key is the documented hash of the canonical text: SHA-256 of the JSON object of
    # user, UTC instant (microseconds) and canonical payload, each a JSON string.
    for _, canonical, key in GOLDEN:
        identity = {
            "user_id": "u1",
            "event_timestamp": "2024-05-01T10:00:00.000000Z",
            "payload": canonical,
        }
        encoded = json.dumps(identity, separators=(",", ":"), ensure_ascii=False)
        assert hashlib.sha256(encoded.encode()).hexdigest() == key, canonical
