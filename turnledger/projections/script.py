"""The projection's Lua script, kept as a string so it ships without package-data.

Apply one planned batch of output records and the applied offsets, atomically.
KEYS[1] is the hash "topic:partition" -> applied offset; KEYS[2..] are the keys the
ops name by index; ARGV[1] is the JSON plan of `plan.py`; ARGV[2], when given, is the epoch
token the caller read from the offsets hash (field `~epoch`): if the hash no longer carries it
(Redis came back empty after a restart, or the projection was dropped) nothing is applied and
the script returns {-1, 0}, so that the caller positions itself again from what Redis holds
instead of writing a batch onto an empty projection. A record applies only when
its offset is greater than the partition's applied offset: offsets have gaps
(transaction markers take offsets), so contiguity is never checked. Offsets travel
and are stored as strings because Lua would print large numbers in exponent form.
The op `xadd` appends one typed event to a conversation's capped stream (`XADD key MAXLEN ~ cap *`); as
every op, it runs only inside an applied group, so a replay or a second projector appends nothing. Its
third argument "1" makes it conditional on the group's last `pappend` having written (a stale preview is
neither stored nor announced).
The op `pappend` applies a preview that carries the text appended at an offset (code points) of the
block's text: it appends only at exactly the length the projection holds (field `length` of the
preview's JSON), skips a record that ends at or before it (applied already), lets offset 0 replace
the text, and counts anything else as a gap (`preview_gaps`) without storing or announcing it.
Returns {applied, skipped, flags}: flags has one character per group, "1" where the group was
applied, "0" where it was skipped (the projector counts the live metrics from exactly the applied ones).
"""

APPLY_SCRIPT = """\
if ARGV[2] and redis.call('HGET', KEYS[1], '~epoch') ~= ARGV[2] then
  return {-1, 0}
end
local groups = cjson.decode(ARGV[1])
local applied = {}
local changed = {}

local function drop_fields(key, keep)
  local fields = redis.call('HKEYS', key)
  for _, f in ipairs(fields) do
    if not keep(f) then redis.call('HDEL', key, f) end
  end
end

local last_preview = true

local function run(op)
  local name, key = op[1], KEYS[op[2]]
  if name == 'hset' then
    local args = {}
    for i = 3, #op do args[#args + 1] = op[i] end
    redis.call('HSET', key, unpack(args))
  elseif name == 'hsetnx' then
    redis.call('HSETNX', key, op[3], op[4])
  elseif name == 'hdel' then
    for i = 3, #op do redis.call('HDEL', key, op[i]) end
  elseif name == 'hincr' then
    redis.call('HINCRBY', key, op[3], op[4])
  elseif name == 'zadd' then
    redis.call('ZADD', key, op[3], op[4])
  elseif name == 'zmax' then
    -- the greatest score wins whatever order the topics interleave in
    redis.call('ZADD', key, 'GT', op[3], op[4])
  elseif name == 'ztrim' then
    redis.call('ZREMRANGEBYRANK', key, 0, -(tonumber(op[3]) + 1))
  elseif name == 'rpush' then
    redis.call('RPUSH', key, op[3])
  elseif name == 'sadd' then
    redis.call('SADD', key, op[3])
  elseif name == 'pappend' then
    -- a preview of a committed operation is stale: ignore it (a retraction is on the same topic,
    -- so a preview after it in offset order is a new read of the generation, e.g. after a replay)
    last_preview = false
    if redis.call('HEXISTS', key, '~committed') == 0 then
      local field, offset, stop = op[3], tonumber(op[4]), tonumber(op[5])
      local text_field = field .. ':text'
      local meta = redis.call('HGET', key, field)
      local held = meta and cjson.decode(meta)['length']
      if held and stop <= held then
        -- applied already: nothing to add
      elseif offset == 0 then
        redis.call('HSET', key, field, op[7], text_field, op[6])
        last_preview = true
      elseif held == offset then
        local text = redis.call('HGET', key, text_field) or ''
        redis.call('HSET', key, field, op[7], text_field, text .. op[6])
        last_preview = true
      else
        -- a record this projection never saw: what it holds stays a true prefix
        redis.call('HINCRBY', KEYS[op[8]], 'preview_gaps', 1)
      end
    end
  elseif name == 'xadd' then
    if op[4] ~= '1' or last_preview then
      local args = {}
      for i = 5, #op do args[#args + 1] = op[i] end
      redis.call('XADD', key, 'MAXLEN', '~', op[3], '*', unpack(args))
    end
  elseif name == 'pretract' then
    local prefix = op[3] .. ':'
    drop_fields(key, function(f) return string.sub(f, 1, #prefix) ~= prefix end)
  elseif name == 'pcommit' then
    drop_fields(key, function(f) return string.sub(f, 1, 1) == '~' end)
    redis.call('HSET', key, '~committed', '1')
  else
    return redis.error_reply('unknown projection op ' .. tostring(name))
  end
end

local n_applied, n_skipped = 0, 0
local flags = {}
for _, group in ipairs(groups) do
  local source, offset = group[1], tonumber(group[2])
  local current = applied[source]
  if current == nil then
    current = tonumber(redis.call('HGET', KEYS[1], source) or '-1')
    applied[source] = current
  end
  if offset > current then
    for _, op in ipairs(group[3]) do
      local err = run(op)
      if err then return err end
    end
    applied[source] = offset
    changed[source] = group[2]
    n_applied = n_applied + 1
    flags[#flags + 1] = '1'
  else
    n_skipped = n_skipped + 1
    flags[#flags + 1] = '0'
  end
end
for source, offset in pairs(changed) do
  redis.call('HSET', KEYS[1], source, offset)
end
return {n_applied, n_skipped, table.concat(flags)}
"""
