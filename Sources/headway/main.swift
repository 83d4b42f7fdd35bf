import HeadwayCLI
