"""A table with a column of every type pgsync maps, and its rows (test-only)."""

from __future__ import annotations

from tests.conftest import Database

SCHEMA_SQL = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy ''quoted''');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE DOMAIN label AS text CHECK (VALUE <> '');
CREATE TYPE pair AS (label text, n integer, amount numeric, tags integer[], at timestamptz);
CREATE TABLE all_types (
    id integer PRIMARY KEY,
    c_int2 smallint,
    c_int4 integer,
    c_int8 bigint,
    c_num124 numeric(12,4),
    c_num numeric,
    c_num5010 numeric(50,10),
    c_numneg numeric(5,-2),
    c_real real,
    c_double double precision,
    c_bool boolean,
    c_text text,
    c_varchar varchar(10),
    c_char char(5),
    c_bytea bytea,
    c_date date,
    c_time time,
    c_timetz timetz,
    c_ts timestamp,
    c_tstz timestamptz,
    c_interval interval,
    c_uuid uuid,
    c_json json,
    c_jsonb jsonb,
    c_inet inet,
    c_cidr cidr,
    c_macaddr macaddr,
    c_money money,
    c_bit bit(4),
    c_varbit varbit(8),
    c_enum mood,
    c_dom_int posint,
    c_dom_text label,
    c_int_arr integer[],
    c_int_2d integer[][],
    c_text_arr text[],
    c_num_arr numeric[],
    c_float_arr double precision[],
    c_comp pair
);
"""

FORTY_DIGITS = "1234567890123456789012345678901234567890"  # 40 significant digits

ROWS_SQL = r"""
INSERT INTO all_types VALUES (
    1, 1, 2, 3, 1234.5678, '3.14159', 0.5, 12345,
    1.1, 0.1::float8 + 0.2::float8, true,
    E'caf\u00e9 \U0001F642 it''s "q" back\\slash\nnew\tline\r', 'short', 'ab', '\x00ff00'::bytea,
    '2024-02-29', '12:34:56.123456', '12:34:56.5+05:30',
    '2024-01-02 03:04:05.123456', '2024-01-02 03:04:05.654321+02',
    '1 year 2 mons 3 days 04:05:06.789', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
    '{"b": 1,  "a": [true, null], "b": 2}', '{"b": 1, "a": [true, null], "é": "\u00e9"}',
    '192.168.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03', 1234.56,
    B'1010', B'101', 'happy ''quoted''', 7, 'domain text',
    '{1,NULL,3}', '{{1,2},{NULL,4}}', '{"a b","q\"uote","back\\slash",NULL,"NULL",""}',
    '{1.50,NULL,-0.0001}', '{1.5,NULL,-0.25}',
    ROW('first', 1, 1.50, '{1,NULL,2}', '2024-01-01 10:00:00.123456+00')
), (
    2, 32767, 2147483647, 9223372036854775807, 99999999.9999, '12345678901234567890123456789012345678.90',
    1234567890123456789012345678901234567890.0123456789, 99900,
    'NaN', 'NaN', false,
    '', '', '', '\x'::bytea,
    'infinity', '00:00:00', '00:00:00+00', 'infinity', 'infinity',
    '-178000000 years', '00000000-0000-0000-0000-000000000000',
    '[]', '{}', '::1', '::/0', 'ff:ff:ff:ff:ff:ff', -92233720368547758.08,
    B'0000', B'', 'sad', 2147483647, ' ',
    '{}', '{}', '{}', '{NaN,Infinity,-Infinity,__FORTY__,0.000000000000000000000000000000000000001}',
    '{NaN,Infinity,-Infinity,5e-324}',
    ROW(NULL, NULL, NULL, NULL, NULL)
), (
    3, -32768, -2147483648, -9223372036854775808, -99999999.9999, 'Infinity',
    -0.0000000001, -99900,
    'Infinity', 'Infinity', true,
    'x', 'ten chars!', 'abcde', '\x0000'::bytea,
    '-infinity', '23:59:59.999999', '23:59:59.999999-12', '-infinity', '-infinity',
    '-1 days +00:00:00.000001', 'ffffffff-ffff-ffff-ffff-ffffffffffff',
    'null', 'null', '2001:db8::ff00:42:8329', '2001:db8::/32', '00:00:00:00:00:00', 92233720368547758.07,
    B'1111', B'11111111', 'ok', 1, 'x',
    '{NULL}', '{{NULL,NULL}}', '{NULL}', '{NULL}', '{NULL}',
    ROW('', 0, 'NaN', '{}', 'infinity')
), (
    4, 0, 0, 0, 0, '-Infinity', 0, 0,
    '-Infinity', '-Infinity', false,
    'plain', 'v', 'a b', '\x'::bytea,
    '1000-01-01', '00:00:00.000001', '00:00:00.000001+14', '1582-10-10 12:00:00', '1582-10-10 12:00:00+00',
    '0', '11111111-2222-3333-4444-555555555555',
    '"str"', '[1, "2", 3.0]', '0.0.0.0', '0.0.0.0/0', '01:23:45:67:89:ab', 0,
    B'0001', B'1', 'sad', 42, 'y',
    '{-2147483648,2147483647}', '{{1},{2},{3}}', '{"{braces}","com,ma"}',
    '{0,3.14159265358979323846264338327950288}',
    '{-0.0,1.7976931348623157e308}',
    NULL
), (
    5, NULL, NULL, NULL, NULL, '-__FORTY__', NULL, NULL,
    '-0', '-0', NULL,
    NULL, NULL, NULL, NULL,
    '9999-12-30', NULL, NULL, '1970-01-01 00:00:00', '1969-12-31 23:59:59.999999+00',
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL
), (
    6, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL,
    NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL
);
""".replace("__FORTY__", FORTY_DIGITS)


# A composite without numerics (a struct in Spark; ``pair`` holds one and is text).
COMPOSITE2_SQL = """
CREATE TYPE tagged AS (label text, tags integer[], at timestamptz);
ALTER TABLE all_types ADD COLUMN c_comp2 tagged;
UPDATE all_types SET c_comp2 = CASE id
    WHEN 1 THEN ROW('first', '{1,NULL,2}', '2024-01-01 10:00:00.123456+00')::tagged
    WHEN 2 THEN ROW(NULL, NULL, NULL)::tagged
    WHEN 3 THEN ROW('', '{}', 'infinity')::tagged END;
"""


# Types whose text a cast (``::text``) or ``to_json`` would write otherwise than their output
# function, which pgoutput sends: xml (its declaration), ranges (their bounds' time zone), a
# composite's dates, timestamps, xml and jsonb fields, arrays of xml and of dates.
TEXT_TYPES_SQL = r"""
CREATE TYPE doc AS (title text, body xml, day date, at timestamp, meta jsonb, flag boolean);
ALTER TABLE all_types ADD COLUMN c_xml xml, ADD COLUMN c_xml_arr xml[],
    ADD COLUMN c_int4range int4range, ADD COLUMN c_tstzrange tstzrange,
    ADD COLUMN c_doc doc, ADD COLUMN c_docs doc[], ADD COLUMN c_date_arr date[];
UPDATE all_types SET
    c_xml = CASE id WHEN 1 THEN '<?xml version="1.0"?><a x="1">café &amp; b</a>'::xml
        WHEN 2 THEN 'text only' WHEN 3 THEN '<?xml version="1.0" encoding="UTF-8" standalone="yes"?><s/>' END,
    c_xml_arr = CASE id WHEN 1 THEN ARRAY['<?xml version="1.0"?><a/>', NULL, '<b>t</b>']::xml[]
        WHEN 2 THEN '{}' END,
    c_int4range = CASE id WHEN 1 THEN '[1,10)'::int4range WHEN 2 THEN 'empty' WHEN 3 THEN '(,)' END,
    c_tstzrange = CASE id WHEN 1 THEN '[2024-01-01 10:00+02, infinity)'::tstzrange WHEN 2 THEN 'empty' END,
    c_doc = CASE id
        WHEN 1 THEN ROW('t', '<?xml version="1.0"?><d/>', '2024-02-29', '2024-01-01 10:00:00.5',
                        '{"k": [1, "x"]}', true)::doc
        WHEN 2 THEN ROW(NULL, NULL, NULL, NULL, NULL, NULL)::doc
        WHEN 3 THEN ROW('', '', 'infinity', '-infinity', 'null', false)::doc END,
    c_docs = CASE id
        WHEN 1 THEN ARRAY[ROW('u', '<e/>', '1999-12-31', '2000-01-01 00:00:00', '[]', NULL)::doc, NULL]
        WHEN 2 THEN '{}' END,
    c_date_arr = CASE id WHEN 1 THEN '{2024-01-01,NULL,infinity}'::date[] WHEN 2 THEN '{}' END;
"""


# Row 7: values outside what Python's datetime holds, compared through integer casts.
ANCIENT_ROW_SQL = """
INSERT INTO all_types (id, c_date, c_ts, c_tstz)
VALUES (7, '0001-12-31 BC', '0001-12-31 23:59:59.5 BC', '12000-06-01 00:00:00.000001+00')
"""

ANCIENT_ID = 7


def create_all_types(database: Database) -> bool:
    """Create and fill the table; True when it has an hstore column."""
    # the job must not depend on the database's settings: give it unusual ones
    database.execute(f"ALTER DATABASE {database.name} SET TimeZone = 'Asia/Kolkata'")
    database.execute(f"ALTER DATABASE {database.name} SET DateStyle = 'SQL, DMY'")
    database.execute(f"ALTER DATABASE {database.name} SET IntervalStyle = 'sql_standard'")
    database.execute(f"ALTER DATABASE {database.name} SET extra_float_digits = -3")
    database.execute(SCHEMA_SQL)
    database.execute(ROWS_SQL)
    database.execute(ANCIENT_ROW_SQL)
    database.execute(COMPOSITE2_SQL)
    database.execute(TEXT_TYPES_SQL)
    available = database.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'hstore'")
    if not available:
        return False
    database.execute("CREATE EXTENSION hstore")
    database.execute("ALTER TABLE all_types ADD COLUMN c_hstore hstore")
    database.execute(
        """UPDATE all_types SET c_hstore = CASE id
               WHEN 1 THEN 'a=>1, "b c"=>"x\\"y", "é"=>NULL, empty=>""'::hstore
               WHEN 2 THEN ''::hstore
               WHEN 3 THEN '"NULL"=>"NULL"'::hstore END"""
    )
    return True
