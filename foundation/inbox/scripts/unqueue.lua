-- Take back a delivery the receiver queued but could not get acknowledged by enough
-- replicas (foundation.inbox.enqueue.DeliveryQueue.put, THE_LOOP_RECEIVER_REPLICAS), so
-- that its redelivery is accepted as new: unless a worker already took it.
-- KEYS[1] = P:delivery:seen:ID   KEYS[2] = P:delivery:ID   KEYS[3] = P:inbox:REF
-- ARGV[1] = ID
-- Returns 1 when the delivery was taken back (its inbox entry, record and marker gone),
-- 0 when a worker has it (its record was marked started, or already deleted when done):
-- then it stays, seen, and a redelivery is a duplicate.
if redis.call('EXISTS', KEYS[2]) == 0 or redis.call('HEXISTS', KEYS[2], 'started') == 1 then
  return 0
end
if redis.call('LREM', KEYS[3], 1, ARGV[1]) == 0 then
  return 0
end
redis.call('DEL', KEYS[2], KEYS[1])
return 1
