-- `GET /v1/tasks?q=` of one or two characters: the tasks holding any indexed trigram that
-- begins with the text, read as one range of the index's instances (term, task), so the
-- cost is what those trigrams' entries are, however many distinct trigrams there are.
-- Names chosen to hold a million distinct trigrams beginning with "a" made the OR of
-- every such trigram (one FTS5 query node each) run for minutes.
CREATE VIRTUAL TABLE task_search_instances USING fts5vocab(task_search, 'instance');
