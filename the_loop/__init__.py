"""the-loop's command line (``the-loop``): the entry points that wire the packages."""
