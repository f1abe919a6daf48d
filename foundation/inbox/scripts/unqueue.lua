-- Take back a delivery the receiver queued but could not get acknowledged by enough
-- replicas (foundation.inbox.enqueue.DeliveryQueue.put, THE_LOOP_RECEIVER_REPLICAS), so
-- that its redelivery is accepted as new: unless a worker already took it.
-- KEYS[1] = P:delivery:seen:ID   KEYS[2] = P:delivery:ID   KEYS[3] = P:inbox:REF
-- KEYS[4] = P:ready   KEYS[5] = P:inboxes   KEYS[6] = P:wake
-- ARGV[1] = ID   ARGV[2] = REF   ARGV[3] = the wake-up job id its enqueue may have set
-- Returns 0 when a worker has it (its record was marked started, or already deleted when
-- done): then it stays, seen, and a redelivery is a duplicate. Else it is taken back (its
-- inbox entry, record and marker gone) and returns 1 when its inbox is left empty (its
-- ref leaves the ready list and the index, and P:wake is cleared if this delivery set
-- it: all as before it came), 2 when other deliveries are still in the inbox (the
-- caller queues the wake-up job it set, if it set one).
if redis.call('EXISTS', KEYS[2]) == 0 or redis.call('HEXISTS', KEYS[2], 'started') == 1 then
  return 0
end
if redis.call('LREM', KEYS[3], 1, ARGV[1]) == 0 then
  return 0
end
redis.call('DEL', KEYS[2], KEYS[1])
if redis.call('LLEN', KEYS[3]) > 0 then
  return 2
end
redis.call('LREM', KEYS[4], 0, ARGV[2])
redis.call('SREM', KEYS[5], ARGV[2])
if redis.call('GET', KEYS[6]) == ARGV[3] then
  redis.call('DEL', KEYS[6])
end
return 1
